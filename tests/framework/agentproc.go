// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// AgentProcessOptions say how to run one ipkeeper-agent process.
type AgentProcessOptions struct {
	// Binary is the ipkeeper-agent executable; the ipkeeper shim must be its sibling.
	Binary string
	// Kubeconfig is the admin kubeconfig of the control plane.
	Kubeconfig string
	// NodeName is passed as --node-name; pods must be bound to it.
	NodeName string
	// Dir holds the socket, the CNI bin dir and the log. It must be short:
	// a unix socket path is limited to 107 bytes.
	Dir string
	// ExtraArgs are appended to the flags (a later flag wins).
	ExtraArgs []string
	// HealthAddr, when set, is the --health-probe-bind-address; by default
	// a free loopback port. Many agents started at once need ports chosen
	// outside the ephemeral range, which their own connections draw from.
	HealthAddr string
	// MetricsAddr, when set, is the --metrics-bind-address; by default a
	// free loopback port.
	MetricsAddr string
	// Args, when set, are the whole command line instead of the flags of
	// the contract below and ExtraArgs: RunInstalled runs an installed
	// DaemonSet's arguments, rewritten for this machine. They must name
	// the socket, CNI bin dir and bind addresses AgentSocketPath,
	// AgentCNIBinDir, HealthAddr and MetricsAddr say.
	Args []string
	// Env, when set, is the whole environment of the process instead of
	// the test's.
	Env []string
}

// AgentSocketPath is the --socket of an agent process whose Dir is dir.
func AgentSocketPath(dir string) string { return filepath.Join(dir, "run", "agent.sock") }

// AgentCNIBinDir is the --cni-bin-dir of an agent process whose Dir is dir.
func AgentCNIBinDir(dir string) string { return filepath.Join(dir, "cni-bin") }

// AgentProcess is a running ipkeeper-agent process.
type AgentProcess struct {
	NodeName string
	// Socket is the agent's --socket, given to the shim as the node's
	// IPKEEPER_AGENT_SOCKET.
	Socket string
	// CNIBinDir is the agent's --cni-bin-dir, where it installs the shim.
	CNIBinDir string
	// HealthAddr serves /readyz.
	HealthAddr string
	// MetricsAddr serves /metrics.
	MetricsAddr string
	// LogPath receives the agent's stdout and stderr.
	LogPath string

	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid once done is closed
}

// StartAgentProcess starts ipkeeper-agent with the flags of its contract:
//
//	--kubeconfig --node-name --socket --cni-bin-dir
//	--metrics-bind-address=127.0.0.1:PORT --health-probe-bind-address=127.0.0.1:PORT
//
// It does not wait for readiness; see WaitReady.
func StartAgentProcess(o AgentProcessOptions) (*AgentProcess, error) {
	// Both ports held open together, so that they differ.
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	if o.HealthAddr == "" {
		o.HealthAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	}
	a := &AgentProcess{
		NodeName:    o.NodeName,
		Socket:      AgentSocketPath(o.Dir),
		CNIBinDir:   AgentCNIBinDir(o.Dir),
		HealthAddr:  o.HealthAddr,
		MetricsAddr: o.MetricsAddr,
		LogPath:     filepath.Join(o.Dir, "agent.log"),
		done:        make(chan struct{}),
	}
	// A node has both directories before the DaemonSet pod starts (the CNI
	// bin dir and /run are host paths); the agent owns what goes in them.
	for _, d := range []string{filepath.Dir(a.Socket), a.CNIBinDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// Appended, so a restarted agent's log follows its predecessor's.
	if a.log, err = os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("creating agent log: %w", err)
	}
	args := o.Args
	if args == nil {
		args = append([]string{
			"--kubeconfig=" + o.Kubeconfig,
			"--node-name=" + o.NodeName,
			"--socket=" + a.Socket,
			"--cni-bin-dir=" + a.CNIBinDir,
			"--metrics-bind-address=" + a.MetricsAddr,
			"--health-probe-bind-address=" + a.HealthAddr,
		}, o.ExtraArgs...)
	}
	a.cmd = exec.Command(o.Binary, args...)
	a.cmd.Env = o.Env
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	// Never outlive the test binary, even if it is killed.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		_ = a.log.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Binary, err)
	}
	go func() {
		a.waitErr = a.cmd.Wait()
		close(a.done)
	}()
	return a, nil
}

// WaitReady polls /readyz until it answers 200 (caches synced, socket
// serving), then until the shim is installed in CNIBinDir. It gives up at
// once if the process exits.
func (a *AgentProcess) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	httpc := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + a.HealthAddr + "/readyz"
	var last string
	err := Eventually(ctx, timeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := httpc.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if exited, werr := a.Exited(); exited {
		return fmt.Errorf("ipkeeper-agent exited before it was ready (%w); log %s:\n%s", werr, a.LogPath, a.Tail(60))
	}
	if err != nil {
		return fmt.Errorf("ipkeeper-agent not ready at %s (last answer: %s): %w; log %s:\n%s", url, last, err, a.LogPath, a.Tail(60))
	}

	shim := filepath.Join(a.CNIBinDir, "ipkeeper")
	err = Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		st, err := os.Stat(shim)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0, nil
	})
	if err != nil {
		return fmt.Errorf("ipkeeper-agent is ready but did not install an executable %s (--cni-bin-dir): %w", shim, err)
	}
	st, err := os.Stat(a.Socket)
	if err != nil {
		return fmt.Errorf("ipkeeper-agent is ready but its --socket is missing: %w", err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("ipkeeper-agent is ready but its --socket %s is not a unix socket (mode %s)", a.Socket, st.Mode())
	}
	return nil
}

// PID is the agent's process ID, for reading its CPU time and memory from /proc.
func (a *AgentProcess) PID() int { return a.cmd.Process.Pid }

// Exited reports whether the process has exited, and how.
func (a *AgentProcess) Exited() (bool, error) {
	select {
	case <-a.done:
		return true, a.waitErr
	default:
		return false, nil
	}
}

// Kill sends SIGKILL (a crash) and waits for the process to go.
func (a *AgentProcess) Kill() {
	_ = a.cmd.Process.Kill()
	<-a.done
	_ = a.log.Close()
}

// Stop sends SIGTERM, waits up to 15s for a graceful exit, then kills.
// It returns an error if the agent had to be killed or exited with a
// failure status on SIGTERM.
func (a *AgentProcess) Stop() error {
	defer func() { _ = a.log.Close() }()
	if exited, err := a.Exited(); exited {
		return fmt.Errorf("ipkeeper-agent had already exited: %w", err)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		var ee *exec.ExitError
		if errors.As(a.waitErr, &ee) && !ee.Exited() {
			return nil // killed by our SIGTERM without handling it: acceptable
		}
		if a.waitErr != nil {
			return fmt.Errorf("ipkeeper-agent exited on SIGTERM with %w", a.waitErr)
		}
		return nil
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		return errors.New("ipkeeper-agent did not exit within 15s of SIGTERM; killed")
	}
}

// Tail returns the last n lines of the agent's log.
func (a *AgentProcess) Tail(n int) string { return TailFile(a.LogPath, n) }

// DumpLogOnFailure prints the end of the agent's log when t fails.
func (a *AgentProcess) DumpLogOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last 80 lines of the ipkeeper-agent log (%s)\n%s", a.LogPath, a.Tail(80))
		}
	})
}
