// SPDX-License-Identifier: Apache-2.0

// Package cniserver is the agent's side of package cniproto: it serves a
// Handler on the agent's unix socket. Each connection carries one request,
// in either of two encodings told apart by its first bytes:
//
//   - a cniproto frame (what the shim sends): the header's magic "ipk",
//     then the JSON Request; the reply is a frame with the JSON Response.
//   - HTTP/1.1 GET cniproto.PathStatus, so that an operator can ask an
//     agent whether it is ready with curl on the node, no tool needed.
//
// Both reach the same Handler with the same panic recovery. The shim
// links package cniproto only: no net/http.
package cniserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// Handler is implemented by the agent. Returning a *types.Error (possibly
// wrapped) sends that CNI error to the runtime; any other error becomes
// types.ErrInternal, or cniproto.ErrPluginNotAvailable for Status. DEL must succeed
// for attachments that no longer exist.
type Handler interface {
	Add(ctx context.Context, req *cniproto.Request) (*types100.Result, error)
	Del(ctx context.Context, req *cniproto.Request) error
	Check(ctx context.Context, req *cniproto.Request) error
	GC(ctx context.Context, req *cniproto.Request) error
	// Status returns nil once the agent can serve ADD (e.g. caches synced).
	Status(ctx context.Context) error
}

// NewHTTPHandler serves the HTTP route documented in the package
// comment. A zero log discards logs.
func NewHTTPHandler(h Handler, log logr.Logger) http.Handler {
	return (&handler{h: h, log: log}).httpMux()
}

// handler serves h as frames, and its Status over HTTP.
type handler struct {
	h   Handler
	log logr.Logger
}

func (s *handler) httpMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+cniproto.PathStatus, s.serveStatus)
	return mux
}

// serve decodes, validates and dispatches one request body and logs the
// outcome.
func (s *handler) serve(ctx context.Context, raw []byte, start time.Time) *cniproto.Response {
	req, cerr := decodeRequest(raw)
	if cerr != nil {
		s.log.Error(cerr, "rejected CNI request")
		return &cniproto.Response{Error: cerr}
	}
	resp := s.dispatch(ctx, req)

	attrs := []any{"command", req.Command, "containerID", req.ContainerID, "ifName", req.IfName,
		"duration", time.Since(start)}
	if a, err := req.CNIArgs(); err == nil && a.PodName != "" {
		attrs = append(attrs, "pod", a.PodNamespace+"/"+a.PodName)
	}
	switch {
	case resp.Error != nil:
		s.log.Error(resp.Error, "CNI request failed", append(attrs, "code", resp.Error.Code)...)
	case req.Command == cniproto.CmdStatus:
		s.log.V(1).Info("CNI request done", attrs...)
	default:
		s.log.Info("CNI request done", attrs...)
	}
	return resp
}

func (s *handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	err := s.call(func() error { return s.h.Status(r.Context()) })
	resp := &cniproto.Response{}
	if err != nil {
		resp.Error = toCNIError(err, cniproto.ErrPluginNotAvailable)
	}
	writeResponse(w, resp)
}

// decodeRequest decodes and validates a request body.
func decodeRequest(raw []byte) (*cniproto.Request, *types.Error) {
	// Unknown fields are tolerated so that a newer shim on the host can
	// still talk to an older agent during upgrades, and vice versa.
	var req cniproto.Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding ipkeeper request: %v", err), "")
	}
	if err := req.Validate(); err != nil {
		return nil, toCNIError(err, types.ErrInternal)
	}
	return &req, nil
}

func (s *handler) dispatch(ctx context.Context, req *cniproto.Request) *cniproto.Response {
	var result *types100.Result
	var err error
	fallback := types.ErrInternal
	switch req.Command {
	case cniproto.CmdAdd:
		err = s.call(func() (e error) { result, e = s.h.Add(ctx, req); return e })
		if err == nil && result == nil {
			err = errors.New("ipkeeper-agent produced no result for ADD")
		}
	case cniproto.CmdDel:
		err = s.call(func() error { return s.h.Del(ctx, req) })
	case cniproto.CmdCheck:
		err = s.call(func() error { return s.h.Check(ctx, req) })
	case cniproto.CmdGC:
		err = s.call(func() error { return s.h.GC(ctx, req) })
	case cniproto.CmdStatus:
		fallback = cniproto.ErrPluginNotAvailable // a failing STATUS means "not ready"
		err = s.call(func() error { return s.h.Status(ctx) })
	}
	if err != nil {
		return &cniproto.Response{Error: toCNIError(err, fallback)}
	}
	if result == nil {
		return &cniproto.Response{}
	}
	if result.CNIVersion == "" {
		result.CNIVersion = types100.ImplementedSpecVersion
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return &cniproto.Response{Error: types.NewError(types.ErrInternal, fmt.Sprintf("encoding ADD result: %v", err), "")}
	}
	return &cniproto.Response{Result: raw}
}

// call runs f, turning a panic into an error so the shim gets a CNI error
// instead of a dropped connection.
func (s *handler) call(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error(fmt.Errorf("panic: %v", p), "panic in ipkeeper handler", "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error in ipkeeper-agent: panic: %v", p)
		}
	}()
	return f()
}

// toCNIError passes a *types.Error through. If the handler wrapped it, the
// code and details are kept and the message keeps the added context.
func toCNIError(err error, fallback uint) *types.Error {
	var ce *types.Error
	if !errors.As(err, &ce) {
		return types.NewError(fallback, err.Error(), "")
	}
	if err == error(ce) { //nolint:errorlint // identity check: was the error returned unwrapped?
		return ce
	}
	msg := err.Error()
	if ce.Details != "" {
		msg = strings.TrimSuffix(msg, "; "+ce.Details)
	}
	return types.NewError(ce.Code, msg, ce.Details)
}

// writeResponse sends resp with an HTTP status derived from it.
func writeResponse(w http.ResponseWriter, resp *cniproto.Response) {
	status := http.StatusOK
	if resp.Error != nil {
		status = httpStatus(resp.Error.Code)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp) // nothing useful to do if the shim hung up
}

// httpStatus is informational only (logs, curl); clients read the body.
func httpStatus(code uint) int {
	switch {
	case code == types.ErrTryAgainLater || code == cniproto.ErrPluginNotAvailable || code == cniproto.ErrPluginNotAvailable+1:
		return http.StatusServiceUnavailable
	case code >= types.ErrIncompatibleCNIVersion && code <= types.ErrInvalidNetNS:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
