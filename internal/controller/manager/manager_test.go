// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

// TestCNAOCommandLineServes: ipkeeper-controller takes a command line as
// CNAO and HCO give their components, and the manager newManager builds
// from it serves its webhook and /metrics (--metrics-cert-dir) so: TLS 1.1
// refused, a client offering only P-256 served, a client offering only h2
// (ALPN) refused; with --enable-http2 that client gets h2. No API server
// is needed: nothing here reads one.
func TestCNAOCommandLineServes(t *testing.T) {
	dir, roots := certDir(t)
	cnao := []string{"--tls-min-version=VersionTLS12",
		"--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
		"--tls-curve-preferences=X25519,CurveP256"}
	start := func(args ...string) (webhook, metrics string) {
		webhookPort := freePort(t)
		metrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		var c CommandOptions
		fs := c.FlagSet()
		fs.SetOutput(io.Discard)
		args = append(args, "--leader-elect=false", "--health-probe-bind-address=0",
			"--webhook-cert-mode=provided", "--webhook-cert-dir="+dir, "--webhook-host=127.0.0.1", "--webhook-port="+strconv.Itoa(webhookPort),
			"--metrics-bind-address="+metrics, "--metrics-cert-dir="+dir)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		// An address nothing listens on: the servers must not need it.
		mgr, _, err := newManager(&rest.Config{Host: "https://127.0.0.1:1"}, runtime.NewScheme(), c.Options)
		if err != nil {
			t.Fatal(err)
		}
		mgr.GetWebhookServer().Register("/ping", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(webhookPort)), metrics
	}
	dial := func(addr string, c *tls.Config) (tls.ConnectionState, error) {
		c.RootCAs = roots
		d := &net.Dialer{Timeout: 10 * time.Second}
		deadline := time.Now().Add(30 * time.Second)
		for {
			conn, err := tls.DialWithDialer(d, "tcp", addr, c)
			if err == nil {
				defer func() { _ = conn.Close() }()
				return conn.ConnectionState(), nil
			}
			// Only a server not listening yet is waited for.
			if !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
				return tls.ConnectionState{}, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	webhook, metrics := start(cnao...)
	for name, addr := range map[string]string{"webhook": webhook, "/metrics": metrics} {
		if _, err := dial(addr, &tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11}); err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("%s, TLS 1.1 client: %v, want a protocol version error", name, err)
		}
		if st, err := dial(addr, &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}}); err != nil || st.NegotiatedProtocol != "" {
			t.Errorf("%s, client offering only P-256 and no ALPN: %v (ALPN %q)", name, err, st.NegotiatedProtocol)
		}
		if _, err := dial(addr, &tls.Config{NextProtos: []string{"h2"}}); err == nil || !strings.Contains(err.Error(), "no application protocol") {
			t.Errorf("%s without --enable-http2, client offering only h2: %v, want no application protocol", name, err)
		}
	}
	webhook, metrics = start(append(cnao, "--enable-http2")...)
	for name, addr := range map[string]string{"webhook": webhook, "/metrics": metrics} {
		if st, err := dial(addr, &tls.Config{NextProtos: []string{"h2"}}); err != nil || st.NegotiatedProtocol != "h2" {
			t.Errorf("%s with --enable-http2, client offering only h2: ALPN %q, %v; want h2", name, st.NegotiatedProtocol, err)
		}
	}
}

// certDir writes httptest's certificate for 127.0.0.1 and its key as
// tlsconfig.CertFile and KeyFile into a new directory, and returns it and
// a pool trusting the certificate.
func certDir(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	donor := httptest.NewTLSServer(http.NotFoundHandler())
	cert, roots := donor.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(donor.Certificate())
	donor.Close()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	err = errors.Join(
		os.WriteFile(filepath.Join(dir, tlsconfig.KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600),
		os.WriteFile(filepath.Join(dir, tlsconfig.CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600))
	if err != nil {
		t.Fatal(err)
	}
	return dir, roots
}

// freePort is a loopback port free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}
