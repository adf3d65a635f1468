// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Limits on one admission request. The API server gives up after the
// configuration's timeoutSeconds (10); answering within HandleTimeout leaves
// it a clear denial instead of a timeout.
const (
	// MaxRequestBytes bounds an AdmissionReview body: a pod and its old
	// version, each at most the API server's 1.5 MiB object limit, plus
	// envelope.
	MaxRequestBytes = 4 << 20
	// HandleTimeout bounds the work (cache and live reads) for one request.
	HandleTimeout = 7 * time.Second
)

// Switch is the handler registered with the webhook server: the pod
// mutator while KubeVirt support runs, a denial while it does not (the
// configuration's rules are off then, so only a stale configuration or a
// replica still starting up sends requests here).
type Switch struct {
	active atomic.Pointer[PodMutator]
}

// Set installs the mutator; nil turns it off. A nil Switch (webhook
// disabled) ignores it.
func (s *Switch) Set(m *PodMutator) {
	if s != nil {
		s.active.Store(m)
	}
}

// Handle admits with the active mutator, or denies with the reason.
func (s *Switch) Handle(ctx context.Context, req admission.Request) admission.Response {
	m := s.active.Load()
	if m == nil {
		mutations.WithLabelValues("denied").Inc()
		return admission.Denied("ipkeeper-controller's KubeVirt support is not running on this replica (KubeVirt CRDs not installed, or caches still syncing); a virt-launcher pod with a persistent-IP network cannot get its IPAMClaim reference yet")
	}
	return m.Handle(ctx, req)
}

// Bounded wraps the webhook's HTTP handler: request bodies larger than
// MaxRequestBytes are refused and each request's context ends after
// HandleTimeout.
func Bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxRequestBytes {
			http.Error(w, fmt.Sprintf("admission request of %d bytes exceeds the limit of %d", r.ContentLength, MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), HandleTimeout)
		defer cancel()
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// RateLimitedReader spaces out live reads: admission requests fall back to
// the API server only for objects the cache has not seen yet (a VMI or NAD
// created just before the pod), and a flood of requests for objects that do
// not exist must not become a flood of API requests. A read waits for a
// token until the request's deadline.
type RateLimitedReader struct {
	client.Reader
	Limiter *rate.Limiter
}

// Get waits for a token, then reads.
func (r RateLimitedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Limiter.Wait(ctx); err != nil {
		return fmt.Errorf("live read of %s rate-limited: %w", key, err)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// List waits for a token, then lists.
func (r RateLimitedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := r.Limiter.Wait(ctx); err != nil {
		return fmt.Errorf("live list rate-limited: %w", err)
	}
	return r.Reader.List(ctx, list, opts...)
}
