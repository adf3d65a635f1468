// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// proxyFault is what the proxy does to one request instead of (or on top
// of) forwarding it.
type proxyFault int

const (
	pfNone   proxyFault = iota
	pfDrop              // forward, let the server apply it, then close the connection without an answer
	pfDelay             // forward after a delay
	pf429               // answer 429 Too Many Requests without forwarding
	pf500               // answer 500 without forwarding
	pfExpire            // answer a watch with 410 Gone (resource version too old)
	numProxyFaults
)

var proxyFaultNames = [...]string{"none", "proxy-drop-response", "proxy-delay", "proxy-429", "proxy-500", "proxy-watch-410"}

func (f proxyFault) String() string { return proxyFaultNames[f] }

// proxyRates are per-request probabilities of each fault.
type proxyRates [numProxyFaults]float64

// backgroundRates apply all the time: low enough that most operations
// succeed, high enough that every kind fires in a short run.
var backgroundRates = proxyRates{pfDrop: 0.01, pfDelay: 0.03, pf429: 0.005, pf500: 0.005, pfExpire: 0.05}

// apiProxy is a fault-injecting reverse proxy in front of kube-apiserver.
// Agents and the controller reach the API server only through it (plain
// HTTP on loopback; it authenticates upstream as the admin), so it can
// drop a response after the server applied the request, delay, refuse
// with 429 or 500, and cut or expire watches. Its decisions come from a
// seeded generator, drawn in the order requests arrive.
type apiProxy struct {
	upstream  *url.URL
	transport http.RoundTripper
	server    *http.Server
	listener  net.Listener

	mu      sync.Mutex
	rng     *rand.Rand
	rates   proxyRates
	burst   proxyFault // raised rate for one kind until burstEnd
	until   time.Time
	enabled bool
	watches map[int]context.CancelFunc
	nextID  int

	counts   [numProxyFaults]atomic.Int64
	requests atomic.Int64
	cuts     atomic.Int64 // watches cut
	gone410  atomic.Int64 // 410 answers seen from the real API server (watch expiry)
}

func newAPIProxy(cfg *rest.Config, seed uint64) (*apiProxy, error) {
	up, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", cfg.Host, err)
	}
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API server transport: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listener: %w", err)
	}
	p := &apiProxy{
		upstream: up, transport: tr, listener: l,
		rng: newProxyRand(seed), rates: backgroundRates,
		watches: map[int]context.CancelFunc{},
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

func newProxyRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// URL is where clients reach the API server through the proxy.
func (p *apiProxy) URL() string { return "http://" + p.listener.Addr().String() }

func (p *apiProxy) close() { _ = p.server.Close() }

// setEnabled turns fault injection on or off (forwarding continues).
func (p *apiProxy) setEnabled(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enabled = on
}

// startBurst raises one fault kind's rate for d.
func (p *apiProxy) startBurst(f proxyFault, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.burst, p.until = f, time.Now().Add(d)
}

// cutWatches ends every open watch; clients re-watch from their last
// resource version (or re-list when it is gone).
func (p *apiProxy) cutWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.watches)
	for id, cancel := range p.watches {
		cancel()
		delete(p.watches, id)
	}
	p.cuts.Add(int64(n))
	return n
}

// decide draws the fault for one request.
func (p *apiProxy) decide(watch, mutating bool) proxyFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rng.Float64() // drawn even when disabled, so the sequence does not depend on the phase
	if !p.enabled {
		return pfNone
	}
	rates := p.rates
	if p.burst != pfNone && time.Now().Before(p.until) {
		rates[p.burst] = 0.25
	}
	var applicable []proxyFault
	if watch {
		applicable = []proxyFault{pfExpire, pfDelay}
	} else {
		applicable = []proxyFault{pf429, pf500, pfDelay}
		if mutating {
			applicable = append(applicable, pfDrop)
		}
	}
	for _, f := range applicable {
		if r < rates[f] {
			return f
		}
		r -= rates[f]
	}
	return pfNone
}

func (p *apiProxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(20+p.rng.IntN(400)) * time.Millisecond
}

func (p *apiProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	q := r.URL.Query()
	watch := q.Get("watch") == "true" || q.Get("watch") == "1"
	mutating := r.Method != http.MethodGet && r.Method != http.MethodHead
	f := p.decide(watch, mutating)
	if f != pfNone {
		p.counts[f].Add(1)
	}
	switch f {
	case pf429:
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "chaos proxy: too many requests, retry")
		return
	case pf500:
		writeStatus(w, http.StatusInternalServerError, "InternalError", "chaos proxy: internal error")
		return
	case pfExpire:
		writeStatus(w, http.StatusGone, "Expired", "chaos proxy: too old resource version")
		return
	case pfDelay:
		select {
		case <-time.After(p.delay()):
		case <-r.Context().Done():
			return
		}
	}
	p.forward(w, r, watch, f == pfDrop)
}

func (p *apiProxy) forward(w http.ResponseWriter, r *http.Request, watch, drop bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if watch {
		p.mu.Lock()
		p.nextID++
		id := p.nextID
		p.watches[id] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.watches, id)
			p.mu.Unlock()
		}()
	}
	out := r.Clone(ctx)
	out.URL.Scheme, out.URL.Host = p.upstream.Scheme, p.upstream.Host
	out.Host, out.RequestURI = "", ""
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization"} {
		out.Header.Del(h)
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		// The API server is down (restarting) or the watch was cut: a
		// load balancer with no backend closes the connection.
		hangUp(w)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusGone {
		p.gone410.Add(1)
	}
	if drop {
		// The server has applied the request; the client never hears.
		_, _ = io.Copy(io.Discard, resp.Body)
		hangUp(w)
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if !watch {
		_, _ = io.Copy(w, resp.Body)
		return
	}
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], []byte(`"code":410`)) {
				p.gone410.Add(1)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// writeStatus answers with a Kubernetes Status object, as the API server would.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	body, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"message": msg, "reason": reason, "code": code,
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// proxyCounts renders the proxy's fault counts for the summary.
func (p *apiProxy) faultCounts() map[string]int64 {
	out := map[string]int64{}
	for f := pfDrop; f < numProxyFaults; f++ {
		out[f.String()] = p.counts[f].Load()
	}
	return out
}
