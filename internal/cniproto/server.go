// SPDX-License-Identifier: Apache-2.0

package cniproto

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
)

// Handler is implemented by the agent. Returning a *types.Error (possibly
// wrapped) sends that CNI error to the runtime; any other error becomes
// types.ErrInternal, or ErrPluginNotAvailable for Status. DEL must succeed
// for attachments that no longer exist.
type Handler interface {
	Add(ctx context.Context, req *Request) (*types100.Result, error)
	Del(ctx context.Context, req *Request) error
	Check(ctx context.Context, req *Request) error
	GC(ctx context.Context, req *Request) error
	// Status returns nil once the agent can serve ADD (e.g. caches synced).
	Status(ctx context.Context) error
}

// NewHTTPHandler serves the routes documented in the package comment. A
// zero log discards logs.
func NewHTTPHandler(h Handler, log logr.Logger) http.Handler {
	s := &httpHandler{h: h, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathCNI, s.serveCNI)
	mux.HandleFunc("GET "+PathStatus, s.serveStatus)
	return mux
}

type httpHandler struct {
	h   Handler
	log logr.Logger
}

func (s *httpHandler) serveCNI(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	req, status, cerr := decodeRequest(w, r)
	if cerr != nil {
		s.log.Error(cerr, "rejected CNI request")
		writeResponse(w, status, &Response{Error: cerr})
		return
	}
	resp := s.dispatch(r.Context(), req)

	attrs := []any{"command", req.Command, "containerID", req.ContainerID, "ifName", req.IfName,
		"duration", time.Since(start)}
	if a, err := req.CNIArgs(); err == nil && a.PodName != "" {
		attrs = append(attrs, "pod", a.PodNamespace+"/"+a.PodName)
	}
	switch {
	case resp.Error != nil:
		s.log.Error(resp.Error, "CNI request failed", append(attrs, "code", resp.Error.Code)...)
	case req.Command == CmdStatus:
		s.log.V(1).Info("CNI request done", attrs...)
	default:
		s.log.Info("CNI request done", attrs...)
	}
	writeResponse(w, 0, resp)
}

func (s *httpHandler) serveStatus(w http.ResponseWriter, r *http.Request) {
	err := s.call(func() error { return s.h.Status(r.Context()) })
	resp := &Response{}
	if err != nil {
		resp.Error = toCNIError(err, ErrPluginNotAvailable)
	}
	writeResponse(w, 0, resp)
}

// decodeRequest reads and validates the body. Errors come with the HTTP
// status to send.
func decodeRequest(w http.ResponseWriter, r *http.Request) (*Request, int, *types.Error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestSize))
	// Unknown fields are tolerated so that a newer shim on the host can
	// still talk to an older agent during upgrades, and vice versa.
	var req Request
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, tooLargeError(0)
		}
		return nil, http.StatusBadRequest,
			types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding ipkeeper request: %v", err), "")
	}
	if err := req.Validate(); err != nil {
		return nil, http.StatusBadRequest, toCNIError(err, types.ErrInternal)
	}
	return &req, 0, nil
}

func (s *httpHandler) dispatch(ctx context.Context, req *Request) *Response {
	var result *types100.Result
	var err error
	fallback := types.ErrInternal
	switch req.Command {
	case CmdAdd:
		err = s.call(func() (e error) { result, e = s.h.Add(ctx, req); return e })
		if err == nil && result == nil {
			err = errors.New("ipkeeper-agent produced no result for ADD")
		}
	case CmdDel:
		err = s.call(func() error { return s.h.Del(ctx, req) })
	case CmdCheck:
		err = s.call(func() error { return s.h.Check(ctx, req) })
	case CmdGC:
		err = s.call(func() error { return s.h.GC(ctx, req) })
	case CmdStatus:
		fallback = ErrPluginNotAvailable // a failing STATUS means "not ready"
		err = s.call(func() error { return s.h.Status(ctx) })
	}
	if err != nil {
		return &Response{Error: toCNIError(err, fallback)}
	}
	if result == nil {
		return &Response{}
	}
	if result.CNIVersion == "" {
		result.CNIVersion = types100.ImplementedSpecVersion
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return &Response{Error: types.NewError(types.ErrInternal, fmt.Sprintf("encoding ADD result: %v", err), "")}
	}
	return &Response{Result: raw}
}

// call runs f, turning a panic into an error so the shim gets a CNI error
// instead of a dropped connection.
func (s *httpHandler) call(f func() error) (err error) {
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

// writeResponse sends resp; status 0 derives the HTTP status from resp.
func writeResponse(w http.ResponseWriter, status int, resp *Response) {
	switch {
	case status != 0:
	case resp.Error != nil:
		status = httpStatus(resp.Error.Code)
	default:
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp) // nothing useful to do if the shim hung up
}

// httpStatus is informational only (logs, curl); clients read the body.
func httpStatus(code uint) int {
	switch {
	case code == types.ErrTryAgainLater || code == ErrPluginNotAvailable || code == ErrPluginNotAvailable+1:
		return http.StatusServiceUnavailable
	case code >= types.ErrIncompatibleCNIVersion && code <= types.ErrInvalidNetNS:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
