// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// ageDir moves the modification time of dir and everything in it back by d,
// standing for that much time passing with no agent.
func ageDir(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-d)
	for _, e := range entries {
		if err := os.Chtimes(filepath.Join(dir, e.Name()), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
}

// With the agent gone for good (uninstalled, or its node's DaemonSet pod
// deleted), DEL must not answer "try again later" forever: pods would hang
// in Terminating. It keeps failing for a bounded time (an agent restarting
// releases the address at once), then succeeds with a warning: the
// controller's garbage collector releases the addresses of pods that no
// longer exist.
func TestDelSucceedsOnceTheAgentIsGoneLongEnough(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	t.Setenv(cniproto.SocketPathEnv, sock)
	var stderr strings.Builder
	p := &Plugin{Stderr: &stderr}

	err := p.Del(cmdArgs(conf("1.1.0")))
	if ce := asCNIError(t, err); ce.Code != types.ErrTryAgainLater {
		t.Fatalf("DEL with the agent just gone: %+v, want try again later", ce)
	}

	ageDir(t, dir, AgentGoneAfter+time.Minute)
	if err := p.Del(cmdArgs(conf("1.1.0"))); err != nil {
		t.Fatalf("DEL with the agent unreachable for longer than %s: %v, want success", AgentGoneAfter, err)
	}
	if !strings.Contains(stderr.String(), "unreachable since") || !strings.Contains(stderr.String(), "garbage collector") {
		t.Errorf("no warning on stderr: %q", stderr.String())
	}
	if ce := asCNIError(t, p.Add(cmdArgs(conf("1.1.0")))); ce.Code != types.ErrTryAgainLater {
		t.Errorf("ADD with the agent gone: %+v, want try again later (only DEL may proceed)", ce)
	}

	// An agent that started after the outage began (its socket is newer)
	// and crashed since restarts the clock.
	ageDir(t, dir, AgentGoneAfter+time.Minute)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // a crash leaves the socket behind
	_ = l.Close()
	if ce := asCNIError(t, p.Del(cmdArgs(conf("1.1.0")))); ce.Code != types.ErrTryAgainLater {
		t.Fatalf("DEL right after a restarted agent crashed: %+v, want try again later", ce)
	}
}
