// SPDX-License-Identifier: Apache-2.0

package cniproto

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// ShutdownTimeout bounds how long Serve waits for in-flight requests after
// its context is cancelled. An interrupted ADD is retried by the runtime,
// but letting it finish avoids needless churn.
const ShutdownTimeout = 30 * time.Second

// Serve listens on socketPath (see Listen) and serves h until ctx is
// cancelled, then shuts down gracefully. It returns nil after a clean
// shutdown.
func Serve(ctx context.Context, socketPath string, h http.Handler) error {
	ln, err := Listen(socketPath)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, h)
}

// Listen creates the socket directory (0700) if missing, removes a stale
// socket left by a previous agent, listens, and restricts the socket to
// root (0600): whoever can connect can allocate and release addresses.
// It refuses to replace a socket that another process is still serving.
func Listen(socketPath string) (net.Listener, error) {
	if socketPath == "" {
		return nil, errors.New("agent socket path is empty")
	}
	dir := filepath.Dir(socketPath)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating agent socket directory %s: %w", dir, err)
	}
	if err := removeStaleSocket(socketPath); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("listening on agent socket: %w", err)
	}
	// Until this chmod the umask-derived mode applies; the 0700 directory
	// (when we created it) covers that window.
	if err := os.Chmod(socketPath, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("restricting agent socket %s to root: %w", socketPath, err)
	}
	return ln, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking for stale agent socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("refusing to replace %s with the agent socket: it exists and is not a socket (mode %v)", path, fi.Mode())
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("another process is already serving on %s; is a second ipkeeper-agent running?", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale agent socket %s: %w", path, err)
	}
	return nil
}

// ServeListener serves h on ln until ctx is cancelled, then shuts down,
// waiting up to ShutdownTimeout for in-flight requests. The listener is
// closed (and a unix socket file unlinked) on return.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// Handlers must not be cancelled the moment shutdown starts, or
		// graceful shutdown would abort half-done allocations.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()

	select {
	case err := <-errCh:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		<-errCh
		return fmt.Errorf("shutting down agent server on %s: %w", ln.Addr(), err)
	}
	if err := <-errCh; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	return nil
}
