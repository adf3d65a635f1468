// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// HasKubeVirt reports whether KubeVirt's CRDs are installed.
func (cp *ControlPlane) HasKubeVirt() bool { return !cp.noKubeVirt }

// InstallKubeVirtCRDs installs KubeVirt's CRDs (generated from the pinned
// KubeVirt module by hack/tools.sh) into a running control plane
// (started WithoutKubeVirtCRDs) and returns once the API server serves them.
func (cp *ControlPlane) InstallKubeVirtCRDs(ctx context.Context) error {
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
		Paths: []string{cp.kubeVirtCRDs}, ErrorIfPathMissing: true, MaxTime: time.Minute, PollInterval: 100 * time.Millisecond,
	}); err != nil {
		return fmt.Errorf("installing the KubeVirt CRDs: %w", err)
	}
	cp.noKubeVirt = false
	return nil
}

// UninstallKubeVirtCRDs removes KubeVirt's CRDs (and so every KubeVirt
// object) and returns once the API server no longer serves them.
func (cp *ControlPlane) UninstallKubeVirtCRDs(ctx context.Context) error {
	if err := envtest.UninstallCRDs(cp.Config, envtest.CRDInstallOptions{
		Paths: []string{cp.kubeVirtCRDs}, ErrorIfPathMissing: true, MaxTime: time.Minute, PollInterval: 100 * time.Millisecond,
	}); err != nil {
		return fmt.Errorf("uninstalling the KubeVirt CRDs: %w", err)
	}
	cp.noKubeVirt = true
	return nil
}
