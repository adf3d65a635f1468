// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto/cniserver"
)

// fakeAgent records requests and answers with canned values.
type fakeAgent struct {
	mu        sync.Mutex
	reqs      []cniproto.Request
	result    *types100.Result
	err       error // returned by every CNI verb except STATUS
	statusErr error
}

func (a *fakeAgent) record(r *cniproto.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, *r)
}

func (a *fakeAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

func (a *fakeAgent) last(t *testing.T) cniproto.Request {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.reqs) == 0 {
		t.Fatal("agent received no request")
	}
	return a.reqs[len(a.reqs)-1]
}

func (a *fakeAgent) Add(_ context.Context, r *cniproto.Request) (*types100.Result, error) {
	a.record(r)
	return a.result, a.err
}

func (a *fakeAgent) Del(_ context.Context, r *cniproto.Request) error   { a.record(r); return a.err }
func (a *fakeAgent) Check(_ context.Context, r *cniproto.Request) error { a.record(r); return a.err }
func (a *fakeAgent) GC(_ context.Context, r *cniproto.Request) error    { a.record(r); return a.err }
func (a *fakeAgent) Status(context.Context) error                       { return a.statusErr }

// startAgent serves a on a real unix socket via cniserver.Serve, makes it
// the node's socket for the shim, and returns its path.
func startAgent(t *testing.T, a cniserver.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	t.Setenv(cniproto.SocketPathEnv, sock) // the node's setting, as the runtime passes it
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cniserver.Serve(ctx, sock, a, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return sock
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent socket %s never came up", sock)
		}
	}
}
