// SPDX-License-Identifier: Apache-2.0

// Package bench measures ipkeeper at scale on a real local control plane,
// every figure against a baseline measured in the same run (the API
// server's raw create rate, a minimal Go binary, whereabouts, ...), and
// prints them as one table at the end. Run with `make bench`; select parts
// with -bench 'AllocationStorm|Scaling|Whereabouts|Shim|Memory|Exhaustion|BootStorm'.
// BenchmarkInProcessAllocationStorm, figure 1 with in-process agents, is for
// profiling only (IPKEEPER_BENCH_IN_PROCESS=1) and adds nothing to the table.
// docs/performance.md holds the results and how to read them.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

var cp *framework.ControlPlane

// whereaboutsDir holds the whereabouts binary and its CRDs (hack/tools.sh
// whereabouts); empty when it is not built, and the comparison is skipped.
var whereaboutsDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if workDir, err = os.MkdirTemp("", "ipkb-"); err != nil {
		fmt.Fprintf(os.Stderr, "creating the work dir: %v\n", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(workDir) }()
	// No garbage collection is needed to allocate; the controller manager would only add load.
	opts := framework.Options{WithoutControllerManager: true}
	if dir := os.Getenv("IPKEEPER_WHEREABOUTS_DIR"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
			whereaboutsDir = dir
			opts.ExtraCRDDirs = []string{filepath.Join(dir, "crds")}
		}
	}
	cp, err = framework.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	code := m.Run()
	printTable(os.Stdout)
	return code
}
