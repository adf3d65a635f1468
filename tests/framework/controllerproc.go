// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ControllerProcess is a running ipkeeper-controller process.
type ControllerProcess struct {
	// WebhookPort serves the pod webhook on 127.0.0.1.
	WebhookPort int
	// MetricsAddr serves /metrics, ProbeAddr /readyz.
	MetricsAddr, ProbeAddr string
	LogPath                string

	args []string
	env  []string
	bin  string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// ControllerProcessOptions say how to run one ipkeeper-controller process.
type ControllerProcessOptions struct {
	// Binary is the ipkeeper-controller executable.
	Binary string
	// Kubeconfig is the kubeconfig it uses.
	Kubeconfig string
	// Dir receives the log.
	Dir string
	// Namespace is its --namespace (leader election lease, webhook Secret).
	Namespace string
	// WebhookConfigName is the MutatingWebhookConfiguration that gets the
	// self-managed CA bundle.
	WebhookConfigName string
	// GCGracePeriod is --gc-grace-period.
	GCGracePeriod time.Duration
	// ExtraArgs are appended to the flags (a later flag wins).
	ExtraArgs []string
	// Args, when set, are the whole command line instead of the flags
	// above: RunInstalled runs an installed Deployment's arguments,
	// rewritten for this machine. They must bind the webhook, metrics and
	// probes where WebhookPort, MetricsAddr and ProbeAddr say.
	Args []string
	// Env, when set, is the whole environment of the process instead of
	// the test's.
	Env []string
	// WebhookPort, MetricsAddr and ProbeAddr, when set, replace the free
	// loopback ports chosen by default.
	WebhookPort            int
	MetricsAddr, ProbeAddr string
}

// StartControllerProcess starts ipkeeper-controller with self-managed
// webhook certificates for 127.0.0.1. It does not wait for readiness; see
// WaitReady.
func StartControllerProcess(o ControllerProcessOptions) (*ControllerProcess, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	c := &ControllerProcess{
		WebhookPort: ports[0],
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		ProbeAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
		LogPath:     filepath.Join(o.Dir, "controller.log"),
		bin:         o.Binary,
		env:         o.Env,
	}
	if o.WebhookPort != 0 {
		c.WebhookPort = o.WebhookPort
	}
	if o.MetricsAddr != "" {
		c.MetricsAddr = o.MetricsAddr
	}
	if o.ProbeAddr != "" {
		c.ProbeAddr = o.ProbeAddr
	}
	if o.Args != nil {
		c.args = o.Args
		if err := c.start(); err != nil {
			return nil, err
		}
		return c, nil
	}
	c.args = append([]string{
		"--kubeconfig=" + o.Kubeconfig,
		"--namespace=" + o.Namespace,
		"--leader-elect=true",
		"--metrics-bind-address=" + c.MetricsAddr,
		"--health-probe-bind-address=" + c.ProbeAddr,
		"--webhook-host=127.0.0.1",
		"--webhook-port=" + strconv.Itoa(c.WebhookPort),
		"--webhook-extra-sans=127.0.0.1",
		"--webhook-configuration-name=" + o.WebhookConfigName,
		"--gc-grace-period=" + o.GCGracePeriod.String(),
		"--log-level=debug",
	}, o.ExtraArgs...)
	if err := c.start(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *ControllerProcess) start() error {
	log, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening controller log: %w", err)
	}
	c.log = log
	c.cmd = exec.Command(c.bin, c.args...)
	c.cmd.Env = c.env
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting %s: %w", c.bin, err)
	}
	c.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(c.cmd, c.done)
	return nil
}

// WaitReady polls /readyz until it answers 200.
func (c *ControllerProcess) WaitReady(ctx context.Context, timeout time.Duration) error {
	url := "http://" + c.ProbeAddr + "/readyz"
	// A process that exits ends the wait at once: it will not get ready.
	// The goroutine watches this process's channel, read here: it may
	// outlive the wait, and a Restart then replaces c.done.
	done := c.done
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := Eventually(ctx, timeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("ipkeeper-controller exited; log tail:\n%s", c.Tail(40))
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("ipkeeper-controller not ready at %s: %w", url, err)
	}
	return nil
}

// Kill sends SIGKILL (a crash) and waits for the process to go.
func (c *ControllerProcess) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
	_ = c.log.Close()
}

// Restart starts the process again with the same flags, once the previous
// one has exited (Kill, or a crash).
func (c *ControllerProcess) Restart() error {
	<-c.done
	_ = c.log.Close()
	return c.start()
}

// Exited reports whether the process has exited.
func (c *ControllerProcess) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to 15s, then kills.
func (c *ControllerProcess) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	_ = c.log.Close()
}

// PID is the running process's ID.
func (c *ControllerProcess) PID() int { return c.cmd.Process.Pid }

// Tail returns the last n lines of the controller's log.
func (c *ControllerProcess) Tail(n int) string { return TailFile(c.LogPath, n) }
