// SPDX-License-Identifier: Apache-2.0

// Package integration runs ipkeeper's integration tests against a real local
// control plane: etcd, kube-apiserver and kube-controller-manager (garbage
// collector and namespace controllers), started once for the package.
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
