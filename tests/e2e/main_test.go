// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

var (
	// cluster is what every e2e test shares (see Cluster).
	cluster *Cluster
	// skipReason is set when the package cannot run here (not root, outside CI).
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// envtest logs through controller-runtime, which without a logger prints
	// a warning with a stack trace after 30s. Show its errors only.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if os.Geteuid() != 0 {
		msg := "the e2e tests create network namespaces, links and a unix socket and must run as root " +
			"(sudo -E go test -count=1 -v ./tests/e2e/, or make test-e2e as root)"
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: CI=true but not running as root: %s\n", msg)
			return 1
		}
		skipReason = "not root: " + msg
		return m.Run() // every test skips with the reason
	}
	for bin, pkg := range map[string]string{"ip": "iproute2", "ping": "iputils-ping"} {
		if _, err := exec.LookPath(bin); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %s not found: install Debian's %s (.ci/run does)\n", bin, pkg)
			return 1
		}
	}

	// The bridge plugin with isGateway turns on IPv4 forwarding on the host;
	// put it back as it was.
	const ipForward = "/proc/sys/net/ipv4/ip_forward"
	if prev, err := os.ReadFile(ipForward); err == nil {
		defer func() {
			if cur, err := os.ReadFile(ipForward); err == nil && !bytes.Equal(cur, prev) {
				_ = os.WriteFile(ipForward, prev, 0o644)
			}
		}()
	}

	code, err := runWithCluster(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	return code
}

// runWithCluster builds the binaries, starts the control plane and the
// cluster, runs the tests and tears everything down.
func runWithCluster(m *testing.M) (code int, err error) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		return 0, err
	}
	// Short: the agents' sockets live in here (unix socket paths are limited).
	dir, err := os.MkdirTemp("", "ipke2e-")
	if err != nil {
		return 0, err
	}
	defer func() {
		if code == 0 && err == nil {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "e2e: kept %s (logs, binaries) for inspection\n", dir)
		}
	}()

	bins, err := framework.BuildBinaries(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		return 0, err
	}

	cp, err := framework.Start(ctx, framework.Options{VirtController: true})
	if err != nil {
		return 0, fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		if serr := cp.Stop(); serr != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", serr)
		}
	}()
	if cp.Tools.CNIPluginsDir == "" {
		return 0, fmt.Errorf("no CNI plugins dir (IPKEEPER_CNI_PLUGINS_DIR): run `make tools`")
	}
	for _, p := range nodePlugins {
		if _, err := os.Stat(filepath.Join(cp.Tools.CNIPluginsDir, p)); err != nil {
			return 0, fmt.Errorf("CNI reference plugin %s missing in %s: run `make tools`", p, cp.Tools.CNIPluginsDir)
		}
	}
	if cp.Tools.Multus == "" {
		return 0, fmt.Errorf("no Multus binary (IPKEEPER_MULTUS): run `make tools`")
	}

	if cluster, err = StartCluster(ctx, cp, bins, filepath.Join(dir, "c"), "node-a", "node-b", "node-c"); err != nil {
		return 0, fmt.Errorf("starting the cluster: %w", err)
	}
	defer func() {
		// Tests leave no network namespace behind.
		if leaked := cluster.Stop(); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: network namespaces of sandboxes left behind: %v\n", leaked)
			if code == 0 {
				code = 1
			}
		}
	}()
	defer stopCoexistence()
	return m.Run(), nil
}

// setup skips the test when the package cannot run here and fails it if an
// agent or the controller has died (a test that kills one restarts it).
func setup(t *testing.T) *Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	for _, n := range cluster.Nodes {
		if exited, err := n.Agent.Exited(); exited {
			t.Fatalf("ipkeeper-agent of %s is no longer running (%v); log tail:\n%s", n.Name, err, n.Agent.Tail(80))
		}
	}
	if cluster.Controller.Exited() {
		t.Fatalf("ipkeeper-controller is no longer running; log tail:\n%s", cluster.Controller.Tail(80))
	}
	return cluster
}
