// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/certs"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The TLS flags reach every TLS server of both daemons: with
// --tls-min-version=1.2 and one cipher suite, the controller's webhook and
// its /metrics (--metrics-cert-dir), and the agent's /metrics, each refuse
// a TLS 1.2 client offering only another suite and serve one offering the
// listed suite; with the default minimum, TLS 1.2 is refused.
func TestTLSFlagsReachEveryServer(t *testing.T) {
	const listed, unlisted = tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
	dir := t.TempDir()
	if err := framework.WriteTestPKI(dir); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	mounted := x509.NewCertPool()
	mounted.AppendCertsFromPEM(caPEM)

	ctrlMetrics, agentMetrics, agentDefault := loopbackAddr(t), loopbackAddr(t), loopbackAddr(t)
	e := startKubeVirtEnv(t, func(o *manager.Options) {
		o.TLS.MinVersion, o.TLS.CipherSuites = "1.2", tls.CipherSuiteName(listed)
		o.MetricsAddr, o.MetricsCertDir = ctrlMetrics, dir
	})
	suites, err := tlsconfig.ParseCipherSuites(tlsconfig.FlagCipherSuites, tls.CipherSuiteName(listed))
	if err != nil {
		t.Fatal(err)
	}
	cp.StartAgent(t, "tls-node", func(o *agent.Options) {
		o.MetricsAddr, o.MetricsCertDir = agentMetrics, dir
		o.MetricsTLS = tlsconfig.Server{MinVersion: tls.VersionTLS12, CipherSuites: suites}
	})
	cp.StartAgent(t, "tls-node-default", func(o *agent.Options) {
		o.MetricsAddr, o.MetricsCertDir = agentDefault, dir // MetricsTLS zero: TLS 1.3
	})

	for _, s := range []struct {
		name, addr, metric string
		roots              *x509.CertPool
	}{
		{"controller webhook", net.JoinHostPort("127.0.0.1", strconv.Itoa(e.ctrl.Options.WebhookPort)), "", e.webhookCA(t)},
		{"controller /metrics", ctrlMetrics, "ipkeeper_controller_kubevirt_support", mounted},
		{"agent /metrics", agentMetrics, "ipkeeper_agent_reservations", mounted},
	} {
		t.Run(s.name, func(t *testing.T) {
			if s.metric != "" {
				// First, once it listens: the metrics themselves.
				body, err := getTLS("https://"+s.addr+"/metrics", s.roots)
				if err != nil || !strings.Contains(body, s.metric) {
					t.Fatalf("GET /metrics over TLS: %v; want %s in %.200q", err, s.metric, body)
				}
			}
			if err := dialSuite(s.addr, s.roots, unlisted); err == nil || !strings.Contains(err.Error(), "handshake failure") {
				t.Errorf("a TLS 1.2 client offering only %s: %v, want a handshake failure", tls.CipherSuiteName(unlisted), err)
			}
			if err := dialSuite(s.addr, s.roots, listed); err != nil {
				t.Errorf("a TLS 1.2 client offering %s: %v", tls.CipherSuiteName(listed), err)
			}
		})
	}
	if _, err := getTLS("https://"+agentDefault+"/metrics", mounted); err != nil {
		t.Errorf("agent /metrics with the default minimum, TLS 1.3 client: %v", err)
	}
	if err := dialSuite(agentDefault, mounted, listed); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("agent /metrics with the default minimum (TLS 1.3), TLS 1.2 client: %v, want a protocol version error", err)
	}
}

// webhookCA is the self-managed CA the webhook's certificate comes from.
func (e *kvEnv) webhookCA(t *testing.T) *x509.CertPool {
	t.Helper()
	var secret corev1.Secret
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: e.ctrl.Options.SecretName}, &secret); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data[certs.CACertKey]) {
		t.Fatal("no CA in the webhook Secret")
	}
	return pool
}

// dialSuite makes a TLS 1.2 handshake offering only suite.
func dialSuite(addr string, roots *x509.CertPool, suite uint16) error {
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{
		RootCAs: roots, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite},
	})
	if err != nil {
		return err
	}
	return conn.Close()
}

// getTLS GETs url, waiting (a bounded poll) for the server to listen.
func getTLS(url string, roots *x509.CertPool) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			defer func() { _ = resp.Body.Close() }()
			b, err := io.ReadAll(resp.Body)
			return string(b), err
		}
		if !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loopbackAddr is a free loopback address for a server the test starts.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}
