// SPDX-License-Identifier: Apache-2.0

package cniserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// ShutdownTimeout bounds how long Serve waits for in-flight requests after
// its context is cancelled. An interrupted ADD is retried by the runtime,
// but letting it finish avoids needless churn.
const ShutdownTimeout = 30 * time.Second

// Time limits on a connection. A client has headerTimeout to send its
// first bytes (a frame header or an HTTP request line) and readTimeout to
// send its whole request; a reply must be taken within writeTimeout. The
// handler itself is bounded by the client's own timeout, not by these.
// Variables so that tests can shorten them.
var (
	headerTimeout = 10 * time.Second
	readTimeout   = 30 * time.Second
	writeTimeout  = 30 * time.Second
)

// Serve listens on socketPath (see Listen) and serves h until ctx is
// cancelled, then shuts down gracefully. It returns nil after a clean
// shutdown. A zero log discards logs.
func Serve(ctx context.Context, socketPath string, h Handler, log logr.Logger) error {
	ln, err := Listen(socketPath)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, h, log)
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

// workerIdle is how long a goroutine that served a connection waits for
// the next one before it ends.
const workerIdle = 10 * time.Second

// connWorkers serves each connection on a goroutine that served one
// before, when one is idle, else on a new one. A request's call path (the
// API client's encoding and decoding) grows a goroutine's stack to tens of
// kilobytes: on a new goroutine per connection, copying the stack as it
// grew was a sixteenth of the agent's CPU in an allocation storm.
type connWorkers struct {
	ctx    context.Context // ends idle goroutines
	conns  chan net.Conn   // unbuffered: a send succeeds only if a goroutine is idle
	serve1 func(net.Conn)
}

func (w *connWorkers) serve(conn net.Conn) {
	select {
	case w.conns <- conn:
	default:
		go w.run(conn)
	}
}

func (w *connWorkers) run(conn net.Conn) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		w.serve1(conn)
		idle.Reset(workerIdle)
		select {
		case conn = <-w.conns:
		case <-idle.C:
			return
		case <-w.ctx.Done():
			return
		}
	}
}

// ServeListener serves h on ln, framed and HTTP alike (see the package
// comment), until ctx is cancelled, then shuts down, waiting up to
// ShutdownTimeout for in-flight requests. The listener is closed (and a
// unix socket file unlinked) on return.
func ServeListener(ctx context.Context, ln net.Listener, h Handler, log logr.Logger) error {
	s := &handler{h: h, log: log}
	// Handlers must not be cancelled the moment shutdown starts, or
	// graceful shutdown would abort half-done allocations.
	base := context.WithoutCancel(ctx)
	httpLn := newConnListener(ln.Addr())
	srv := &http.Server{
		Handler:           s.httpMux(),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       readTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(httpLn) }()

	var framed sync.WaitGroup // connections being sniffed or served as frames
	pool := &connWorkers{ctx: ctx, conns: make(chan net.Conn), serve1: func(conn net.Conn) {
		defer framed.Done()
		s.serveConn(base, conn, httpLn)
	}}
	acceptErr := make(chan error, 1)
	go func() {
		for delay := time.Duration(0); ; {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
					acceptErr <- nil
					return
				}
				// Out of file descriptors and the like: back off as
				// net/http does rather than spin or give up.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Error(err, "accepting on the agent socket", "retryIn", delay)
				select {
				case <-time.After(delay):
					continue
				case <-ctx.Done():
					acceptErr <- nil
					return
				}
			}
			delay = 0
			framed.Add(1)
			pool.serve(conn)
		}
	}()

	var serveErr error
	select {
	case err := <-httpErr:
		serveErr = fmt.Errorf("serving HTTP on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	_ = ln.Close() // stops accepting and unlinks the socket
	<-acceptErr
	if serveErr != nil {
		_ = httpLn.Close()
		framed.Wait()
		return serveErr
	}

	sctx, cancel := context.WithTimeout(base, ShutdownTimeout)
	defer cancel()
	framedDone := make(chan struct{})
	go func() { framed.Wait(); close(framedDone) }()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		<-httpErr
		return fmt.Errorf("shutting down agent server on %s: %w", ln.Addr(), err)
	}
	if err := <-httpErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	select {
	case <-framedDone:
	case <-sctx.Done():
		return fmt.Errorf("shutting down agent server on %s: requests still in flight after %v", ln.Addr(), ShutdownTimeout)
	}
	return nil
}

// sniffBufferSize is what the first read of a connection may bring: a
// typical request whole, or an HTTP request's headers.
const sniffBufferSize = 8 << 10

// serveConn reads a connection's first bytes and serves it as a frame or
// hands it to the HTTP server.
func (s *handler) serveConn(ctx context.Context, conn net.Conn, httpLn *connListener) {
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(headerTimeout))
	// One read usually brings the whole request: the shim writes its
	// frame at once.
	br := bufio.NewReaderSize(conn, sniffBufferSize)
	first, err := br.Peek(len(cniproto.FrameMagic))
	if err != nil && len(first) == 0 {
		_ = conn.Close() // connected and left, as a liveness check does
		return
	}
	if !cniproto.IsFrame(first) {
		_ = conn.SetReadDeadline(time.Time{}) // net/http sets its own
		buffered, _ := br.Peek(br.Buffered())
		httpLn.push(&prefixConn{Conn: conn, prefix: buffered})
		return
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(start.Add(readTimeout))
	raw, err := cniproto.ReadFrame(br, cniproto.MaxRequestSize)
	if err != nil {
		var tooLarge *cniproto.FrameTooLargeError
		var fe *cniproto.FrameError
		switch {
		case errors.As(err, &tooLarge):
			s.reply(conn, &cniproto.Response{Error: cniproto.TooLargeError(int(min(tooLarge.Size, math.MaxInt32)))})
		case errors.As(err, &fe):
			s.reply(conn, &cniproto.Response{Error: types.NewError(types.ErrDecodingFailure, fmt.Sprintf("ipkeeper-agent: %v", err), "")})
		}
		// A request cut short has no one left to answer.
		s.log.Error(err, "rejected CNI request")
		return
	}
	_ = conn.SetReadDeadline(time.Time{})

	// The client keeps the connection open until it has the reply, so a
	// read that returns means it hung up (gave up): the request's context
	// is cancelled, as net/http does for an HTTP request.
	rctx, cancel := context.WithCancel(ctx)
	hungUp := make(chan struct{})
	go func() {
		defer close(hungUp)
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel()
		}
	}()
	resp := s.serve(rctx, raw, start)
	_ = conn.SetReadDeadline(time.Unix(1, 0)) // ends the hang-up watch
	<-hungUp
	cancel()
	s.reply(conn, resp)
}

// reply writes resp as a frame. A reply over cniproto.MaxResponseSize,
// which the client would refuse, becomes an error saying so.
func (s *handler) reply(conn net.Conn, resp *cniproto.Response) {
	body, err := json.Marshal(resp)
	if err == nil && len(body) > cniproto.MaxResponseSize {
		err = fmt.Errorf("the reply is %d bytes, over the %d-byte limit", len(body), cniproto.MaxResponseSize)
	}
	if err != nil {
		body, _ = json.Marshal(&cniproto.Response{Error: types.NewError(types.ErrInternal, fmt.Sprintf("ipkeeper-agent: encoding the reply: %v", err), "")})
	}
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := cniproto.WriteFrame(conn, body); err != nil {
		s.log.Error(err, "sending a CNI reply: the plugin hung up")
	}
}

// connListener hands connections found to speak HTTP to the http.Server.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// push hands c to the HTTP server, or closes it if the server is gone.
func (l *connListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// prefixConn replays the bytes read while sniffing.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
