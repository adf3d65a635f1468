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
	"net/http"
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

// dialError marks errors from connecting, so they can be told apart from
// failures after the agent accepted the connection.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

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
		return nil, tooLargeError(body.Len())
	}
	return c.roundTrip(ctx, http.MethodPost, PathCNI, req.Command, &body)
}

// Status asks whether the agent is ready to serve CNI requests. It returns
// nil when ready, the agent's *types.Error when not, or an
// *UnavailableError when the agent cannot be reached.
func (c *Client) Status(ctx context.Context) error {
	_, err := c.roundTrip(ctx, http.MethodGet, PathStatus, "status", nil)
	return err
}

func (c *Client) roundTrip(ctx context.Context, method, path, what string, body io.Reader) (*Response, error) {
	sock := c.socketPath()
	timeout := c.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The host part is ignored by the unix dialer; it only shows in logs.
	hreq, err := http.NewRequestWithContext(ctx, method, "http://ipkeeper-agent"+path, body)
	if err != nil {
		return nil, fmt.Errorf("building %s request: %w", what, err)
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, &dialError{err}
			}
			return conn, nil
		},
		DisableKeepAlives: true,
	}}
	hresp, err := hc.Do(hreq)
	if err != nil {
		var de *dialError
		if errors.As(err, &de) {
			return nil, &UnavailableError{SocketPath: sock, Err: de.err}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("ipkeeper-agent at %s did not answer the %s request within %v: %w", sock, what, timeout, err)
		}
		return nil, fmt.Errorf("%s request to ipkeeper-agent at %s: %w", what, sock, err)
	}
	defer func() { _ = hresp.Body.Close() }()

	raw, err := io.ReadAll(io.LimitReader(hresp.Body, MaxResponseSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s reply from ipkeeper-agent at %s: %w", what, sock, err)
	}
	if len(raw) > MaxResponseSize {
		return nil, fmt.Errorf("%s reply from ipkeeper-agent at %s exceeds %d bytes", what, sock, MaxResponseSize)
	}
	var resp Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("ipkeeper-agent at %s answered the %s request with HTTP %d and an unreadable body %s: %w",
			sock, what, hresp.StatusCode, quoteTrunc(string(raw)), err)
	}
	if resp.Error != nil {
		return &resp, resp.Error
	}
	if hresp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("ipkeeper-agent at %s answered the %s request with HTTP %d and no error details",
			sock, what, hresp.StatusCode)
	}
	return &resp, nil
}

// tooLargeError is shared by client and server so both sides word it
// alike; n is the request size if known, else 0.
func tooLargeError(n int) *types.Error {
	msg := fmt.Sprintf("ipkeeper request exceeds the %d-byte (1 MiB) limit", MaxRequestSize)
	if n > 0 {
		msg = fmt.Sprintf("ipkeeper request is %d bytes, over the %d-byte (1 MiB) limit", n, MaxRequestSize)
	}
	return types.NewError(types.ErrInvalidNetworkConfig, msg+"; CNI network configs are expected to be a few KiB", "")
}
