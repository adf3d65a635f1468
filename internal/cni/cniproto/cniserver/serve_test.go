// SPDX-License-Identifier: Apache-2.0

package cniserver

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

func TestServeSocketPermissions(t *testing.T) {
	sock := serve(t, &funcHandler{})
	for path, want := range map[string]fs.FileMode{sock: 0o600, filepath.Dir(sock): 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %v, want %v", path, got, want)
		}
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	// A socket file nobody serves, as left behind by a killed agent.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()

	ln, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen over stale socket: %v", err)
	}
	_ = ln.Close()
}

func TestListenRefusesLiveSocketAndNonSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() { // accept so the probe dial completes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another process is already serving") {
		t.Fatalf("Listen on a live socket: err = %v", err)
	}

	file := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("Listen on a regular file: err = %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Fatal("Listen clobbered a regular file")
	}
}

func TestServeGracefulShutdown(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	handlerCtxErr := make(chan error, 1)
	h := &funcHandler{del: func(*cniproto.Request) error {
		close(started)
		<-release
		return nil
	}}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sock, ctxProbe{h, handlerCtxErr}, logr.Discard()) }()
	waitForSocket(t, sock, done)

	req := addReq()
	req.Command = cniproto.CmdDel
	callErr := make(chan error, 1)
	go func() { _, err := (&cniproto.Client{SocketPath: sock}).Do(context.Background(), req); callErr <- err }()
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-callErr; err != nil {
		t.Fatalf("in-flight DEL failed during shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := <-handlerCtxErr; err != nil {
		t.Fatalf("handler context was cancelled by shutdown: %v", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket still present after shutdown: %v", err)
	}
}

// ctxProbe records whether the handler's context was cancelled by the time
// Del returned.
type ctxProbe struct {
	*funcHandler
	ctxErr chan<- error
}

func (p ctxProbe) Del(ctx context.Context, r *cniproto.Request) error {
	err := p.funcHandler.Del(ctx, r)
	p.ctxErr <- ctx.Err()
	return err
}

// TestConnWorkersReuseAnIdleGoroutine checks that connections served one
// after another share one goroutine, that concurrent ones each get one,
// and that idle goroutines end with the context.
func TestConnWorkersReuseAnIdleGoroutine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var served sync.WaitGroup
	release := make(chan struct{})
	var hold atomic.Bool
	var held atomic.Int32 // connections being served at once, each on its own goroutine
	w := &connWorkers{ctx: ctx, conns: make(chan net.Conn), serve1: func(c net.Conn) {
		defer served.Done()
		if hold.Load() {
			held.Add(1)
			<-release
		}
		_ = c.Close()
	}}
	before := runtime.NumGoroutine()
	for i := range 20 {
		a, b := net.Pipe()
		_ = b.Close()
		served.Add(1)
		if i == 0 {
			w.serve(a)
		} else {
			// The worker that served the last one takes it once it
			// waits again (serve would start another meanwhile).
			waitFor(t, func() bool {
				select {
				case w.conns <- a:
					return true
				default:
					return false
				}
			})
		}
		served.Wait()
	}
	if n := runtime.NumGoroutine(); n > before+1 {
		t.Errorf("20 connections one after another left %d goroutines, want at most 1", n-before)
	}
	hold.Store(true)
	for range 3 {
		a, b := net.Pipe()
		_ = b.Close()
		served.Add(1)
		w.serve(a)
	}
	// Not the process's goroutine count: goroutines of earlier tests
	// still ending were counted in before (CI saw it never reach
	// before+3).
	waitFor(t, func() bool { return held.Load() == 3 })
	close(release)
	served.Wait()
	cancel()
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within 5s (%d goroutines)", runtime.NumGoroutine())
		}
		time.Sleep(time.Millisecond)
	}
}
