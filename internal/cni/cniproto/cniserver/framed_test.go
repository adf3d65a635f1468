// SPDX-License-Identifier: Apache-2.0

package cniserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// recorder is a Handler that records the verbs it was called with and
// the contexts they ran in.
type recorder struct {
	mu    sync.Mutex
	verbs []string
	block chan struct{} // if set, ADD waits for it or for its context
	ctxs  chan error    // if set, ADD sends its context's error on return
	add   func() (*types100.Result, error)
}

func (r *recorder) note(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verbs = append(r.verbs, v)
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.verbs...)
}

func (r *recorder) Add(ctx context.Context, _ *cniproto.Request) (*types100.Result, error) {
	r.note(cniproto.CmdAdd)
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
		}
		if r.ctxs != nil {
			r.ctxs <- ctx.Err()
		}
	}
	if r.add != nil {
		return r.add()
	}
	return &types100.Result{IPs: []*types100.IPConfig{{Address: net.IPNet{IP: net.IPv4(10, 9, 0, 3), Mask: net.CIDRMask(24, 32)}}}}, nil
}

func (r *recorder) Del(context.Context, *cniproto.Request) error { r.note(cniproto.CmdDel); return nil }
func (r *recorder) Check(context.Context, *cniproto.Request) error {
	r.note(cniproto.CmdCheck)
	return nil
}
func (r *recorder) GC(context.Context, *cniproto.Request) error { r.note(cniproto.CmdGC); return nil }
func (r *recorder) Status(context.Context) error                { r.note(cniproto.CmdStatus); return nil }

// TestFramedVerbs sends each verb as the shim does and checks it reaches
// its handler method and answers as the verb should.
func TestFramedVerbs(t *testing.T) {
	h := &recorder{}
	sock := serve(t, h)
	c := &cniproto.Client{SocketPath: sock}
	for _, verb := range []string{cniproto.CmdAdd, cniproto.CmdDel, cniproto.CmdCheck, cniproto.CmdGC, cniproto.CmdStatus} {
		t.Run(verb, func(t *testing.T) {
			req := addReq()
			req.Command = verb
			resp, err := c.Do(t.Context(), req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if got := h.seen(); got[len(got)-1] != verb {
				t.Fatalf("handler calls %v, want the last to be %s", got, verb)
			}
			if hasResult := len(resp.Result) > 0; hasResult != (verb == cniproto.CmdAdd) {
				t.Fatalf("%s answered result %s", verb, resp.Result)
			}
		})
	}
	if err := c.Status(t.Context()); err != nil {
		t.Fatalf("Status: %v", err)
	}
}

// rawExchange writes in on a fresh connection to sock, half-closes it
// when closeWrite is set, and returns all the server sent back.
func rawExchange(t *testing.T, sock string, in []byte, closeWrite bool) []byte {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write(in); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		_ = conn.(*net.UnixConn).CloseWrite()
	}
	out, err := io.ReadAll(conn)
	// A server that answers without reading all that was sent closes a
	// connection with unread data, which Linux reports as a reset once
	// the reply has been read.
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the reply: %v (got %q)", err, out)
	}
	return out
}

// replyError decodes a reply frame that must carry a CNI error.
func replyError(t *testing.T, out []byte) *types.Error {
	t.Helper()
	body, err := cniproto.ReadFrame(bytes.NewReader(out), cniproto.MaxResponseSize)
	if err != nil {
		t.Fatalf("reply %.80q is not a frame: %v", out, err)
	}
	var resp cniproto.Response
	if err := json.Unmarshal(body, &resp); err != nil || resp.Error == nil {
		t.Fatalf("reply %s: want a CNI error (%v)", body, err)
	}
	return resp.Error
}

// TestFramedServerRejects covers what a client other than the shim may
// send: each is answered with a clear error or, when nobody is left to
// answer, dropped, and the handler never runs.
func TestFramedServerRejects(t *testing.T) {
	h := &recorder{}
	sock := serve(t, h)
	header := func(n int) []byte { b := cniproto.FrameHeader(n); return b[:] }
	tests := []struct {
		name     string
		in       []byte
		wantCode uint   // 0: no frame expected back
		wantMsg  string // in the error, or the HTTP reply when wantCode is 0
	}{
		{"oversized", header(cniproto.MaxRequestSize + 1), types.ErrInvalidNetworkConfig,
			"ipkeeper request is 1048577 bytes, over the 1048576-byte (1 MiB) limit"},
		{"other version", []byte("ipk\x09\x00\x00\x00\x02{}"), types.ErrDecodingFailure, "protocol version 9, this side speaks version 1"},
		{"not JSON", append(header(5), "hello"...), types.ErrDecodingFailure, "decoding ipkeeper request"},
		{"invalid request", append(header(19), `{"command":"FROB"}`+"\n"...), types.ErrInvalidEnvironmentVariables, `unknown CNI command "FROB"`},
		{"truncated body", append(header(100), `{"command":`...), 0, ""},
		{"truncated header", []byte("ipk\x01\x00"), 0, ""},
		{"garbage goes to HTTP", []byte("\x00\x01\x02\x03\x04\x05\x06\x07\r\n\r\n"), 0, "HTTP/1.1 400 Bad Request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := rawExchange(t, sock, tt.in, true)
			if tt.wantCode == 0 {
				if !strings.Contains(string(out), tt.wantMsg) || (tt.wantMsg == "" && len(out) > 0) {
					t.Fatalf("reply %q, want %q", out, tt.wantMsg)
				}
				return
			}
			ce := replyError(t, out)
			if ce.Code != tt.wantCode || !strings.Contains(ce.Msg, tt.wantMsg) {
				t.Fatalf("error %+v, want code %d containing %q", ce, tt.wantCode, tt.wantMsg)
			}
		})
	}
	if got := h.seen(); len(got) != 0 {
		t.Fatalf("handler ran for rejected requests: %v", got)
	}
}

// TestFramedReplyTooLarge: a result over MaxResponseSize, which the shim
// would refuse, is replaced by an error saying so.
func TestFramedReplyTooLarge(t *testing.T) {
	sock := serve(t, &recorder{add: func() (*types100.Result, error) {
		return &types100.Result{DNS: types.DNS{Domain: strings.Repeat("d", cniproto.MaxResponseSize)}}, nil
	}})
	_, err := (&cniproto.Client{SocketPath: sock}).Do(t.Context(), addReq())
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInternal || !strings.Contains(ce.Msg, "over the 1048576-byte limit") {
		t.Fatalf("error = %v, want code 999 naming the limit", err)
	}
}

// fakeAgent listens on a fresh socket and runs serve for each connection:
// an agent that misbehaves in a chosen way.
func fakeAgent(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { _ = conn.Close() }()
				serve(conn)
			}()
		}
	}()
	return sock
}

// TestClientAgainstMisbehavingAgents: what the shim says when the agent
// answers with something it cannot read.
func TestClientAgainstMisbehavingAgents(t *testing.T) {
	readRequest := func(conn net.Conn) { _, _ = cniproto.ReadFrame(conn, cniproto.MaxRequestSize) }
	tests := []struct {
		name    string
		agent   func(net.Conn)
		timeout time.Duration
		wantMsg string
		check   func(error) bool
	}{
		{"hangs up", func(conn net.Conn) { readRequest(conn) },
			0, "closed the connection without answering the ADD request", func(err error) bool { return errors.Is(err, io.EOF) }},
		{"cuts the reply short", func(conn net.Conn) {
			readRequest(conn)
			h := cniproto.FrameHeader(50)
			_, _ = conn.Write(append(h[:], `{"result":`...))
		}, 0, "frame body cut short after 10 of 50 bytes", func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"oversized reply", func(conn net.Conn) {
			readRequest(conn)
			h := cniproto.FrameHeader(cniproto.MaxResponseSize + 1)
			_, _ = conn.Write(h[:])
		}, 0, "ipkeeper frame of 1048577 bytes exceeds the 1048576-byte limit", func(err error) bool {
			var e *cniproto.FrameTooLargeError
			return errors.As(err, &e)
		}},
		{"garbage", func(conn net.Conn) { readRequest(conn); _, _ = conn.Write([]byte("SSH-2.0-OpenSSH\r\n")) },
			0, `malformed ipkeeper frame header "SSH-2.0-"`, func(err error) bool { var e *cniproto.FrameError; return errors.As(err, &e) }},
		{"unreadable body", func(conn net.Conn) { readRequest(conn); _ = cniproto.WriteFrame(conn, []byte("nope")) },
			0, `answered the ADD request with an unreadable body "nope"`, nil},
		{"never answers", func(conn net.Conn) { readRequest(conn); _, _ = conn.Read(make([]byte, 1)) },
			50 * time.Millisecond, "did not answer the ADD request within 50ms", func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := fakeAgent(t, tt.agent)
			_, err := (&cniproto.Client{SocketPath: sock, Timeout: tt.timeout}).Do(t.Context(), addReq())
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantMsg)
			}
			if tt.check != nil && !tt.check(err) {
				t.Fatalf("error = %v (%T): wrong kind", err, err)
			}
		})
	}
}

// TestHTTPStatusOnly: curl on the node can ask whether the agent is
// ready; nothing else is served over HTTP.
func TestHTTPStatusOnly(t *testing.T) {
	var mu sync.Mutex
	ready, calls := errors.New("caches not synced"), 0
	sock := serve(t, &funcHandler{status: func() error { mu.Lock(); defer mu.Unlock(); calls++; return ready }})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	get := func() (int, cniproto.Response) {
		hresp, err := hc.Get("http://ipkeeper-agent" + cniproto.PathStatus)
		if err != nil {
			t.Fatalf("GET status: %v", err)
		}
		defer func() { _ = hresp.Body.Close() }()
		var resp cniproto.Response
		if err := json.NewDecoder(hresp.Body).Decode(&resp); err != nil {
			t.Fatalf("decoding the reply: %v", err)
		}
		return hresp.StatusCode, resp
	}
	if status, resp := get(); status != http.StatusServiceUnavailable || resp.Error == nil ||
		resp.Error.Code != cniproto.ErrPluginNotAvailable || !strings.Contains(resp.Error.Msg, "caches not synced") {
		t.Fatalf("not ready: HTTP %d %+v, want 503 with code %d", status, resp.Error, cniproto.ErrPluginNotAvailable)
	}
	mu.Lock()
	ready = nil
	mu.Unlock()
	if status, resp := get(); status != http.StatusOK || resp.Error != nil {
		t.Fatalf("ready: HTTP %d %+v", status, resp.Error)
	}
	body, _ := json.Marshal(addReq())
	hresp, err := hc.Post("http://ipkeeper-agent/v1/cni", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	_ = hresp.Body.Close()
	if hresp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /v1/cni: HTTP %d, want 404 (CNI requests are framed only)", hresp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("Status called %d times, want 2", calls)
	}
}

// TestFramedHangUpCancelsRequest: a shim that gives up (its timeout, or
// killed by the runtime) cancels the agent's work on its request, as an
// HTTP client's hang-up does.
func TestFramedHangUpCancelsRequest(t *testing.T) {
	h := &recorder{block: make(chan struct{}), ctxs: make(chan error, 1)}
	defer close(h.block)
	sock := serve(t, h)
	_, err := (&cniproto.Client{SocketPath: sock, Timeout: 100 * time.Millisecond}).Do(t.Context(), addReq())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want the client's timeout", err)
	}
	select {
	case err := <-h.ctxs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler context error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled after the client hung up")
	}
}

// TestFramedSlowClient: a client that connects and sends nothing, or
// only part of a frame, is dropped after the header or read timeout
// instead of holding a goroutine forever.
func TestFramedSlowClient(t *testing.T) {
	oldHeader, oldRead := headerTimeout, readTimeout
	headerTimeout, readTimeout = 100*time.Millisecond, 200*time.Millisecond
	// Registered before serve's, so it runs after the server is stopped.
	t.Cleanup(func() { headerTimeout, readTimeout = oldHeader, oldRead })
	h := &recorder{}
	sock := serve(t, h)
	header := cniproto.FrameHeader(10)
	for _, tt := range []struct {
		name string
		in   []byte
	}{
		{"silent", nil},
		{"half a header", header[:5]},
		{"half a body", append(header[:], "{}"...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out := rawExchange(t, sock, tt.in, false) // returns once the server closes
			if len(out) != 0 {
				t.Fatalf("server answered %q", out)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("server held the connection for %v", took)
			}
		})
	}
	if got := h.seen(); len(got) != 0 {
		t.Fatalf("handler ran: %v", got)
	}
}
