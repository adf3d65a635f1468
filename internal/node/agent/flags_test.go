// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

func TestCommandLineTLS(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		wantMin    uint16
		wantSuites []uint16
		wantErr    string
	}{
		{nil, tls.VersionTLS13, nil, ""},
		{[]string{"--metrics-cert-dir=/certs", "--tls-min-version=1.2", "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
			tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, ""},
		{[]string{"--tls-min-version=1.0"}, 0, nil, `invalid --tls-min-version "1.0": must be VersionTLS12 or VersionTLS13`},
		{[]string{"--tls-cipher-suites=TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"}, 0, nil, `invalid --tls-cipher-suites: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA" is insecure`},
	} {
		var o CommandOptions
		fs := o.FlagSet()
		fs.SetOutput(io.Discard)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := o.Complete()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: Complete() = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if o.Agent.MetricsTLS.MinVersion != tc.wantMin || !slices.Equal(o.Agent.MetricsTLS.CipherSuites, tc.wantSuites) {
			t.Errorf("%v: MetricsTLS = %+v, want min %#x, suites %v", tc.args, o.Agent.MetricsTLS, tc.wantMin, tc.wantSuites)
		}
	}
}

// TestServeHTTPOverTLS: with a TLS configuration the metrics server speaks
// TLS only, at the configured minimum; without one it is plain HTTP.
func TestServeHTTPOverTLS(t *testing.T) {
	// httptest's certificate (for 127.0.0.1), taken from a server of its own.
	donor := httptest.NewTLSServer(http.NotFoundHandler())
	cert, roots := donor.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(donor.Certificate())
	donor.Close()

	h := http.NewServeMux()
	h.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ipkeeper_agent_reservations 0\n"))
	})
	serve := func(cfg *tls.Config) string { return serveMetrics(t, h, cfg) }
	get := func(url string, minV, maxV uint16) (string, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: minV, MaxVersion: maxV},
		}}
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := c.Get(url)
			if err == nil {
				defer func() { _ = resp.Body.Close() }()
				body, err := io.ReadAll(resp.Body)
				return string(body), err
			}
			// Only a refused connection (not listening yet) is retried.
			if !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
				return "", err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// As Run builds it from --tls-min-version's default.
	secure := serve(tlsconfig.Server{MinVersion: tls.VersionTLS13}.Config(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }))
	if _, err := get("https://"+secure+"/metrics", tls.VersionTLS12, tls.VersionTLS12); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.2 client against a TLS 1.3 minimum: %v, want a protocol version error", err)
	}
	if body, err := get("https://"+secure+"/metrics", tls.VersionTLS13, tls.VersionTLS13); err != nil || !strings.Contains(body, "ipkeeper_agent_reservations") {
		t.Errorf("TLS 1.3 client: %q, %v", body, err)
	}
	// Go's TLS server answers a plain request with a 400 that says so.
	if body, err := get("http://"+secure+"/metrics", 0, 0); err == nil && strings.Contains(body, "ipkeeper_agent_reservations") {
		t.Error("plain HTTP served the metrics on the TLS port")
	}

	plain := serve(nil)
	if body, err := get("http://"+plain+"/metrics", 0, 0); err != nil || !strings.Contains(body, "ipkeeper_agent_reservations") {
		t.Errorf("plain HTTP (no --metrics-cert-dir): %q, %v", body, err)
	}
}

// serveMetrics runs serveHTTP with h and cfg on a free loopback address
// until the test ends, and returns the address.
func serveMetrics(t *testing.T, h http.Handler, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // serveHTTP listens itself
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHTTP(ctx, addr, h, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveHTTP: %v", err)
		}
	})
	return addr
}

// TestCNAOCommandLine: ipkeeper-agent takes a command line as CNAO and HCO
// give their components, and its /metrics server (serveHTTP, as Run starts
// it) then refuses TLS 1.1, honours the curves (a P-256-only client
// connects) and refuses an HTTP/2-only client, which --enable-http2 lets
// in.
func TestCNAOCommandLine(t *testing.T) {
	donor := httptest.NewTLSServer(http.NotFoundHandler())
	cert, roots := donor.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(donor.Certificate())
	donor.Close()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	cnao := []string{"--metrics-cert-dir=/certs", "--tls-min-version=VersionTLS12",
		"--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
		"--tls-curve-preferences=X25519,P-256"}
	start := func(args ...string) string {
		var o CommandOptions
		fs := o.FlagSet()
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if err := o.Complete(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return serveMetrics(t, h, o.Agent.MetricsTLS.Config(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }))
	}
	http2Get := func(addr string) (string, error) {
		var protos http.Protocols
		protos.SetHTTP2(true)
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, Protocols: &protos}}
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := c.Get("https://" + addr + "/metrics")
			if err == nil {
				_ = resp.Body.Close()
				return resp.Proto, nil
			}
			if !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
				return "", err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	dial := func(addr string, c *tls.Config) error {
		c.RootCAs = roots
		conn, err := tls.Dial("tcp", addr, c)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}

	addr := start(cnao...)
	if _, err := http2Get(addr); err == nil || !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("HTTP/2-only client without --enable-http2: %v, want no application protocol", err)
	}
	if err := dial(addr, &tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11}); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 client: %v, want a protocol version error", err)
	}
	if err := dial(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CurvePreferences: []tls.CurveID{tls.CurveP256}}); err != nil {
		t.Errorf("TLS 1.2 client offering only P-256: %v", err)
	}
	if proto, err := http2Get(start(append(cnao, "--enable-http2")...)); err != nil || proto != "HTTP/2.0" {
		t.Errorf("HTTP/2-only client with --enable-http2: %q, %v", proto, err)
	}
}

// Profiles are served only when asked for, and then on their own listener:
// the flag is empty by default, and the handler serves pprof's pages.
func TestProfilingOnlyWhenAsked(t *testing.T) {
	var o CommandOptions
	fs := o.FlagSet()
	fs.SetOutput(io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.Agent.ProfilingAddr != "" {
		t.Errorf("--profiling-bind-address defaults to %q, want empty (off)", o.Agent.ProfilingAddr)
	}
	if err := fs.Parse([]string{"--profiling-bind-address=127.0.0.1:9912"}); err != nil || o.Agent.ProfilingAddr != "127.0.0.1:9912" {
		t.Errorf("--profiling-bind-address=127.0.0.1:9912: %q, %v", o.Agent.ProfilingAddr, err)
	}
	srv := httptest.NewServer(profilingHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline: %s", resp.Status)
	}
}
