// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// clusterAPICRDDir holds Cluster API's real IPAddressClaim, IPAddress and
// Cluster CRDs, from the pinned module (hack/crdgen).
func clusterAPICRDDir(root string) string { return filepath.Join(root, "tests", "crds", "cluster-api") }

// InstallClusterAPICRDs installs Cluster API's CRDs into a running control
// plane (started WithoutClusterAPICRDs) and returns once the API server
// serves them.
func (cp *ControlPlane) InstallClusterAPICRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
		Paths: []string{clusterAPICRDDir(root)}, ErrorIfPathMissing: true, MaxTime: time.Minute, PollInterval: 100 * time.Millisecond,
	}); err != nil {
		return fmt.Errorf("installing the Cluster API CRDs: %w", err)
	}
	return nil
}
