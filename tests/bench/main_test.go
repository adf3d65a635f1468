// SPDX-License-Identifier: Apache-2.0

// Package bench measures ipkeeper's allocation throughput on a real local
// control plane and, in the same run, the API server's raw create rate that
// bounds it (each allocation costs at least one create). Run with `make bench`.
package bench

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
	// No garbage collection is needed to allocate; the controller manager would only add load.
	cp, err = framework.Start(context.Background(), framework.Options{WithoutControllerManager: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	return m.Run()
}
