// SPDX-License-Identifier: Apache-2.0

// Package integration runs ipkeeper's integration tests against a real local
// control plane: etcd, kube-apiserver, kube-controller-manager (garbage
// collector and namespace controllers) and KubeVirt's virt-controller,
// started once for the package. virt-controller acts on every namespace, so
// every VM of these tests is run through framework.KubeVirt.
package integration

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	cp, err = framework.Start(context.Background(), framework.Options{VirtController: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		}
	}()
	return m.Run()
}
