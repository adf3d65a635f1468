// SPDX-License-Identifier: Apache-2.0

package cniserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// funcHandler is a Handler whose behaviour each test sets; nil funcs succeed.
type funcHandler struct {
	add    func(*cniproto.Request) (*types100.Result, error)
	del    func(*cniproto.Request) error
	status func() error
}

func (h *funcHandler) Add(_ context.Context, r *cniproto.Request) (*types100.Result, error) {
	if h.add == nil {
		return &types100.Result{}, nil
	}
	return h.add(r)
}

func (h *funcHandler) Del(_ context.Context, r *cniproto.Request) error {
	if h.del == nil {
		return nil
	}
	return h.del(r)
}

func (h *funcHandler) Check(context.Context, *cniproto.Request) error { return nil }
func (h *funcHandler) GC(context.Context, *cniproto.Request) error    { return nil }

func (h *funcHandler) Status(context.Context) error {
	if h.status == nil {
		return nil
	}
	return h.status()
}

// serve starts h on a fresh socket and returns its path; the server is
// stopped, and must shut down cleanly, when the test ends.
func serve(t *testing.T, h Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sock, h, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitForSocket(t, sock, done)
	return sock
}

func waitForSocket(t *testing.T, sock string, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("Serve returned early: %v", err)
		default:
		}
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return
		}
	}
	t.Fatalf("agent socket %s never came up", sock)
}

func addReq() cniproto.Request {
	return cniproto.Request{Command: cniproto.CmdAdd, ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "net1",
		Config: json.RawMessage(`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"ipkeeper"}}`)}
}

func TestClientServerAdd(t *testing.T) {
	var got *cniproto.Request
	sock := serve(t, &funcHandler{add: func(r *cniproto.Request) (*types100.Result, error) {
		got = r
		return &types100.Result{IPs: []*types100.IPConfig{{Address: mustCIDR(t, "10.1.0.7/24")}}}, nil
	}})
	req := addReq()
	req.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"
	req.Config = json.RawMessage(`{"cniVersion":"1.1.0","name":"n","html":"<&>"}`)
	resp, err := (&cniproto.Client{SocketPath: sock}).Do(t.Context(), req)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got.Args != req.Args || got.IfName != "net1" || string(got.Config) != string(req.Config) {
		t.Fatalf("agent received %+v (config %s), want %+v", got, got.Config, req)
	}
	var res types100.Result
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		t.Fatalf("decoding result %s: %v", resp.Result, err)
	}
	if res.CNIVersion != "1.1.0" || len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.1.0.7/24" {
		t.Fatalf("result = %s", resp.Result)
	}
}

func TestClientServerErrors(t *testing.T) {
	cniErr := types.NewError(types.ErrInvalidNetworkConfig, "subnet 10.0.0.0/33 is invalid", "see ipam.ranges[0]")
	tests := []struct {
		name     string
		del      func(*cniproto.Request) error
		wantCode uint
		wantMsg  string
		wantDet  string
	}{
		{"passthrough", func(*cniproto.Request) error { return cniErr }, 7, cniErr.Msg, cniErr.Details},
		{"wrapped keeps context", func(*cniproto.Request) error { return fmt.Errorf("releasing: %w", cniErr) }, 7,
			"releasing: " + cniErr.Msg, cniErr.Details},
		{"plain error is internal", func(*cniproto.Request) error { return errors.New("etcd on fire") }, types.ErrInternal, "etcd on fire", ""},
		{"panic is internal", func(*cniproto.Request) error { panic("boom") }, types.ErrInternal, "internal error in ipkeeper-agent: panic: boom", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serve(t, &funcHandler{del: tt.del})
			req := addReq()
			req.Command = cniproto.CmdDel
			resp, err := (&cniproto.Client{SocketPath: sock}).Do(t.Context(), req)
			var ce *types.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Do error = %v (%T), want *types.Error", err, err)
			}
			if resp == nil || resp.Error != ce {
				t.Fatalf("Do response = %+v, want the error in it too", resp)
			}
			if ce.Code != tt.wantCode || ce.Msg != tt.wantMsg || ce.Details != tt.wantDet {
				t.Fatalf("got %+v, want code %d msg %q details %q", ce, tt.wantCode, tt.wantMsg, tt.wantDet)
			}
		})
	}
}

func TestStatusNotReady(t *testing.T) {
	sock := serve(t, &funcHandler{status: func() error { return errors.New("informer caches not synced") }})
	c := &cniproto.Client{SocketPath: sock}
	_, postErr := c.Do(t.Context(), cniproto.Request{Command: cniproto.CmdStatus, Config: []byte(`{}`)})
	for name, err := range map[string]error{"GET /v1/status": c.Status(t.Context()), "POST STATUS": postErr} {
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != cniproto.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "not synced") {
			t.Errorf("%s: error = %v, want code 50 mentioning the cause", name, err)
		}
	}
}

func TestStatusReady(t *testing.T) {
	sock := serve(t, &funcHandler{})
	if err := (&cniproto.Client{SocketPath: sock}).Status(t.Context()); err != nil {
		t.Fatalf("Status: %v", err)
	}
}

func TestRequestValidation(t *testing.T) {
	sock := serve(t, &funcHandler{})
	c := &cniproto.Client{SocketPath: sock}
	for _, tc := range []struct {
		mutate func(*cniproto.Request)
		code   uint
		msg    string
	}{
		{func(r *cniproto.Request) { r.Command = "FROB" }, types.ErrInvalidEnvironmentVariables, `unknown CNI command "FROB"`},
		{func(r *cniproto.Request) { r.IfName = "" }, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME is required for ADD"},
		{func(r *cniproto.Request) { r.Config = json.RawMessage(`[1]`) }, types.ErrDecodingFailure, "not a JSON object"},
		{func(r *cniproto.Request) { r.Config = nil }, types.ErrDecodingFailure, "missing"},
	} {
		req := addReq()
		tc.mutate(&req)
		_, err := c.Do(t.Context(), req)
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != tc.code || !strings.Contains(ce.Msg, tc.msg) {
			t.Errorf("Do(%+v) error = %v, want code %d containing %q", req, err, tc.code, tc.msg)
		}
	}
}

func TestRequestTooLarge(t *testing.T) {
	sock := serve(t, &funcHandler{})
	big := json.RawMessage(`{"name":"n","pad":"` + strings.Repeat("x", cniproto.MaxRequestSize) + `"}`)

	// The client refuses before sending...
	_, err := (&cniproto.Client{SocketPath: sock}).Do(t.Context(), cniproto.Request{Command: cniproto.CmdGC, Config: big})
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "1 MiB") {
		t.Fatalf("client: error = %v, want code 7 naming the 1 MiB limit", err)
	}

	// ...and the server enforces the limit against other clients.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	h := cniproto.FrameHeader(cniproto.MaxRequestSize + 1)
	if _, err := conn.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	raw, err := cniproto.ReadFrame(conn, cniproto.MaxResponseSize)
	if err != nil {
		t.Fatalf("reading the server's reply: %v", err)
	}
	var resp cniproto.Response
	if err := json.Unmarshal(raw, &resp); err != nil || resp.Error == nil {
		t.Fatalf("server reply %s: want a CNI error (%v)", raw, err)
	}
	if resp.Error.Code != types.ErrInvalidNetworkConfig || !strings.Contains(resp.Error.Msg, "over the 1048576-byte (1 MiB) limit") {
		t.Fatalf("server reply %+v", resp.Error)
	}
}

func TestClientUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nope", "agent.sock")
	_, err := (&cniproto.Client{SocketPath: sock}).Do(t.Context(), addReq())
	var ue *cniproto.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("error = %v (%T), want *cniproto.UnavailableError", err, err)
	}
	want := "ipkeeper-agent is not reachable at " + sock + ": dial unix " + sock +
		": connect: no such file or directory (is the ipkeeper-agent DaemonSet running on this node?)"
	if err.Error() != want {
		t.Fatalf("error =\n  %s\nwant\n  %s", err, want)
	}
	if err := (&cniproto.Client{SocketPath: sock}).Status(t.Context()); !errors.As(err, &ue) {
		t.Fatalf("Status error = %v, want *cniproto.UnavailableError", err)
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	sock := serve(t, &funcHandler{del: func(*cniproto.Request) error { <-release; return nil }})
	defer close(release) // before the server's cleanup, which waits for the handler
	req := addReq()
	req.Command = cniproto.CmdDel
	_, err := (&cniproto.Client{SocketPath: sock, Timeout: 50 * time.Millisecond}).Do(t.Context(), req)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer the DEL request within 50ms") {
		t.Fatalf("error = %v", err)
	}
}

func mustCIDR(t *testing.T, s string) net.IPNet {
	t.Helper()
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return *n
}

func TestHandlerLogsRequests(t *testing.T) {
	var logs syncBuffer
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- ServeListener(ctx, ln, &funcHandler{}, logr.FromSlogHandler(slog.NewTextHandler(&logs, nil)))
	}()
	defer func() { cancel(); <-done }()
	req := addReq()
	req.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0"
	if _, err := (&cniproto.Client{SocketPath: sock}).Do(t.Context(), req); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	for _, want := range []string{"command=ADD", "containerID=c1", "ifName=net1", "pod=ns/web-0"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %q", logs.String(), want)
		}
	}
}

// syncBuffer is a bytes.Buffer the server's goroutines may write while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
