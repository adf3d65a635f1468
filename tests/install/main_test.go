// SPDX-License-Identifier: Apache-2.0

// Package install tests ipkeeper as users install it: `make release`
// renders install.yaml and packages the Helm chart, and those, installed
// onto a real local control plane (etcd, kube-apiserver,
// kube-controller-manager, started once for the package), run as
// processes with the commands they state (framework.RunInstalled) and
// serve CNI requests.
//
// Every test installs into its own namespace or cleans up what it
// installed before it ends, and none runs in parallel with another: the
// installations share cluster-scoped objects (ClusterRoles, the webhook
// configuration, admission policies, CRDs).
package install

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
	cp, err = framework.Start(context.Background(), framework.Options{})
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
