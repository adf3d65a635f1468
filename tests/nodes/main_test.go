// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

func TestMain(m *testing.M) {
	// Nodes' PID 1 is this binary too: EnterLab runs it and does not
	// return there; in the test process it re-executes once in the lab's
	// network namespace.
	if os.Geteuid() != 0 {
		msg := "the real-node lane runs containerd, kubelets and network namespaces and must run as root (make test-nodes as root)"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: CI=true but not running as root:", msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		os.Exit(0)
	}
	if err := framework.EnterLab(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	os.Exit(m.Run())
}
