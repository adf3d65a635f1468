package e2e

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

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// ControllerProc is a running ipkeeper-controller process.
type ControllerProc struct {
	// WebhookPort serves the pod webhook on 127.0.0.1.
	WebhookPort int
	// MetricsAddr serves /metrics, ProbeAddr /readyz.
	MetricsAddr, ProbeAddr string
	LogPath                string

	args []string
	bin  string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// ControllerNamespace is the controller's own namespace in e2e runs.
const ControllerNamespace = "ipkeeper-system"

// WebhookConfigName is the MutatingWebhookConfiguration e2e runs register.
const WebhookConfigName = "ipkeeper-e2e"

// StartController starts ipkeeper-controller with self-managed webhook
// certificates for 127.0.0.1 and a short garbage collection grace period.
// extra flags come last, so they override the defaults.
func StartController(bin, kubeconfig, dir string, gcGrace time.Duration, extra ...string) (*ControllerProc, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	c := &ControllerProc{
		WebhookPort: ports[0],
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		ProbeAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
		LogPath:     filepath.Join(dir, "controller.log"),
		bin:         bin,
	}
	c.args = []string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + ControllerNamespace,
		"--leader-elect=true",
		"--metrics-bind-address=" + c.MetricsAddr,
		"--health-probe-bind-address=" + c.ProbeAddr,
		"--webhook-host=127.0.0.1",
		"--webhook-port=" + strconv.Itoa(c.WebhookPort),
		"--webhook-extra-sans=127.0.0.1",
		"--webhook-configuration-name=" + WebhookConfigName,
		"--gc-grace-period=" + gcGrace.String(),
		"--log-level=debug",
	}
	c.args = append(c.args, extra...)
	if err := c.start(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *ControllerProc) start() error {
	log, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening controller log: %w", err)
	}
	c.log = log
	c.cmd = exec.Command(c.bin, c.args...)
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
func (c *ControllerProc) WaitReady(ctx context.Context, timeout time.Duration) error {
	url := "http://" + c.ProbeAddr + "/readyz"
	err := framework.Eventually(ctx, timeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case <-c.done:
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
func (c *ControllerProc) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
	_ = c.log.Close()
}

// Restart starts the process again with the same flags.
func (c *ControllerProc) Restart() error { return c.start() }

// Stop sends SIGTERM and waits up to 15s, then kills.
func (c *ControllerProc) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	_ = c.log.Close()
}

// Tail returns the last n lines of the controller's log.
func (c *ControllerProc) Tail(n int) string { return tailFile(c.LogPath, n) }
