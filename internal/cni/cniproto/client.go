// SPDX-License-Identifier: Apache-2.0

package cniproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Client talks to the agent. The zero value uses DefaultSocketPath and
// DefaultTimeout. A Client holds no connections, so it is cheap to create
// per call, which suits the one-shot CNI shim.
type Client struct {
	SocketPath string
	Timeout    time.Duration // for each call, on top of any ctx deadline
}

// UnavailableError means the agent's socket could not be connected to
// (missing, refused, or not permitted), as opposed to a failure reported
// by a running agent.
type UnavailableError struct {
	SocketPath string
	Err        error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("ipkeeper-agent is not reachable at %s: %v (is the ipkeeper-agent DaemonSet running on this node?)",
		e.SocketPath, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

func (c *Client) socketPath() string {
	if c.SocketPath == "" {
		return DefaultSocketPath
	}
	return c.SocketPath
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// Do sends req to the agent. If the agent answers with a CNI error, Do
// returns the Response together with that *types.Error as err, so callers
// cannot mistake it for success. If the agent cannot be reached, err is an
// *UnavailableError.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // keep the config as close to stdin as JSON allows
	if err := enc.Encode(req); err != nil {
		return nil, fmt.Errorf("encoding %s request: %w", req.Command, err)
	}
	if body.Len() > MaxRequestSize {
		return nil, TooLargeError(body.Len())
	}
	return c.roundTrip(ctx, req.Command, body.Bytes())
}

// statusRequest is what Status sends: STATUS needs no network config, but
// a Request always carries one.
var statusRequest = []byte(`{"command":"STATUS","config":{}}`)

// Status asks whether the agent is ready to serve CNI requests. It returns
// nil when ready, the agent's *types.Error when not, or an
// *UnavailableError when the agent cannot be reached.
func (c *Client) Status(ctx context.Context) error {
	_, err := c.roundTrip(ctx, CmdStatus, statusRequest)
	return err
}

// roundTrip sends body as one frame on a new connection and reads the
// reply frame. The connection stays open until the reply is read: the
// agent takes a hang-up as the caller giving up and cancels the request.
func (c *Client) roundTrip(ctx context.Context, what string, body []byte) (*Response, error) {
	sock := c.socketPath()
	timeout := c.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		if ctx.Err() != nil {
			return nil, timedOut(sock, what, timeout, ctx.Err(), err)
		}
		return nil, &UnavailableError{SocketPath: sock, Err: err}
	}
	defer func() { _ = conn.Close() }()
	// The deadline bounds the exchange; cancelling ctx early moves it to
	// now, which unblocks a read or write in progress.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if err := WriteFrame(conn, body); err != nil {
		if cerr := ctxErr(ctx, err); cerr != nil {
			return nil, timedOut(sock, what, timeout, cerr, err)
		}
		return nil, fmt.Errorf("sending the %s request to ipkeeper-agent at %s: %w", what, sock, err)
	}
	raw, err := ReadFrame(conn, MaxResponseSize)
	if err != nil {
		switch cerr := ctxErr(ctx, err); {
		case cerr != nil:
			return nil, timedOut(sock, what, timeout, cerr, err)
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("ipkeeper-agent at %s closed the connection without answering the %s request: %w", sock, what, err)
		}
		return nil, fmt.Errorf("reading the %s reply from ipkeeper-agent at %s: %w", what, sock, err)
	}
	var resp Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("ipkeeper-agent at %s answered the %s request with an unreadable body %s: %w",
			sock, what, quoteTrunc(string(raw)), err)
	}
	if resp.Error != nil {
		return &resp, resp.Error
	}
	return &resp, nil
}

// ctxErr is why an exchange on a connection failed with err if ctx ended
// it: the connection's deadline is the context's, and may fire a moment
// before the context's own timer.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return nil
}

// timedOut words a deadline or cancellation; it wraps the context's error so
// that callers can test for context.DeadlineExceeded.
func timedOut(sock, what string, timeout time.Duration, ctxErr, err error) error {
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return fmt.Errorf("ipkeeper-agent at %s did not answer the %s request within %v: %w (%w)", sock, what, timeout, ctxErr, err)
	}
	return fmt.Errorf("%s request to ipkeeper-agent at %s: %w (%w)", what, sock, ctxErr, err)
}

// TooLargeError is shared by client and server so both sides word it
// alike; n is the request size if known, else 0.
func TooLargeError(n int) *types.Error {
	msg := fmt.Sprintf("ipkeeper request exceeds the %d-byte (1 MiB) limit", MaxRequestSize)
	if n > 0 {
		msg = fmt.Sprintf("ipkeeper request is %d bytes, over the %d-byte (1 MiB) limit", n, MaxRequestSize)
	}
	return types.NewError(types.ErrInvalidNetworkConfig, msg+"; CNI network configs are expected to be a few KiB", "")
}
