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
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// nodeName is the agent's --node-name; test pods are bound to it.
const nodeName = "ipkeeper-e2e-node"

var (
	env *Env
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

	code, err := runWithEnv(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	return code
}

// runWithEnv builds the binaries, starts the control plane and the agent,
// runs the tests and tears everything down.
func runWithEnv(m *testing.M) (code int, err error) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		return 0, err
	}
	// Short: the agent socket lives in here (unix socket paths are limited).
	dir, err := os.MkdirTemp("", "ipke2e-")
	if err != nil {
		return 0, err
	}
	defer func() {
		if code == 0 && err == nil {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "e2e: kept %s (agent log, binaries) for inspection\n", dir)
		}
	}()

	bins, err := framework.BuildBinaries(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		return 0, err
	}

	cp, err := framework.Start(ctx, framework.Options{})
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
	for _, p := range []string{"bridge", "macvlan", "loopback"} {
		if _, err := os.Stat(filepath.Join(cp.Tools.CNIPluginsDir, p)); err != nil {
			return 0, fmt.Errorf("CNI reference plugin %s missing in %s: run `make tools`", p, cp.Tools.CNIPluginsDir)
		}
	}
	if err := framework.EnsureNode(ctx, cp.Client, nodeName); err != nil {
		return 0, err
	}

	agent, err := framework.StartAgentProcess(framework.AgentProcessOptions{Binary: bins.Agent, Kubeconfig: cp.KubeconfigPath, NodeName: nodeName, Dir: dir})
	if err != nil {
		return 0, err
	}
	defer func() {
		if serr := agent.Stop(); serr != nil {
			fmt.Fprintf(os.Stderr, "e2e: stopping the agent: %v; log tail:\n%s\n", serr, agent.Tail(40))
		}
	}()
	if err := agent.WaitReady(ctx, 2*time.Minute); err != nil {
		return 0, err
	}

	env = &Env{
		CP:          cp,
		Agent:       agent,
		CNIPath:     []string{agent.CNIBinDir, cp.Tools.CNIPluginsDir},
		CNICacheDir: filepath.Join(dir, "cni-cache"),
		bins:        bins,
		dir:         dir,
	}
	defer func() {
		if sharedCluster != nil {
			sharedCluster.Stop()
		}
	}()
	return m.Run(), nil
}

var (
	sharedCluster    *Cluster
	sharedClusterErr error
	clusterOnce      sync.Once
)

// cluster returns the Cluster (controller, three agents, Multus) the
// whole-system tests share, starting it on first use.
func cluster(t *testing.T) *Cluster {
	t.Helper()
	e := setup(t)
	if e.CP.Tools.Multus == "" {
		t.Fatal("no Multus binary (IPKEEPER_MULTUS): run `make tools`")
	}
	clusterOnce.Do(func() {
		sharedCluster, sharedClusterErr = StartCluster(context.Background(), e.CP, e.bins, filepath.Join(e.dir, "c"), "node-a", "node-b", "node-c")
	})
	if sharedClusterErr != nil {
		t.Fatalf("starting the cluster: %v", sharedClusterErr)
	}
	return sharedCluster
}

// setup skips the test when the package cannot run here, fails it if the
// agent has died, and prints the agent's log if the test fails.
func setup(t *testing.T) *Env {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if exited, err := env.Agent.Exited(); exited {
		t.Fatalf("ipkeeper-agent is no longer running (%v); log tail:\n%s", err, env.Agent.Tail(80))
	}
	env.Agent.DumpLogOnFailure(t)
	return env
}
