// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

func TestTLSOptionsKeepsExistingCertificateSource(t *testing.T) {
	existing := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("existing") }
	cfg := &tls.Config{GetCertificate: existing}
	TLSOptions(tlsconfig.Server{MinVersion: tls.VersionTLS13}, nil)(cfg)
	if cfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %#x, want TLS 1.3", cfg.MinVersion)
	}
	if _, err := cfg.GetCertificate(nil); err == nil || err.Error() != "existing" {
		t.Error("nil getCert replaced the existing GetCertificate")
	}
}

// serve accepts connections on a TLS listener configured by opts and reports
// each server-side handshake result.
func serve(t *testing.T, opts func(*tls.Config)) (addr string, results <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{}
	opts(cfg)
	tln := tls.NewListener(ln, cfg)
	ch := make(chan error)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := tln.Accept()
			if err != nil {
				return // listener closed
			}
			err = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
			ch <- err
		}
	}()
	t.Cleanup(func() {
		_ = tln.Close()
		<-done
	})
	return ln.Addr().String(), ch
}

func TestTLSHandshake(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.clock.t = time.Now() // handshakes verify against the real clock
	e.reconcile()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(e.secret().Data[CACertKey]) {
		t.Fatal("ca.crt not loadable")
	}
	srv := &Server{Reader: e.c, Namespace: testNS, Name: testSecret}

	dial := func(addr string, results <-chan error, minV, maxV uint16, trust *x509.CertPool) (version uint16, clientErr, serverErr error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{
			RootCAs:    trust,
			ServerName: "ipkeeper-webhook.ipkeeper-system.svc",
			MinVersion: minV,
			MaxVersion: maxV,
		})
		if err == nil {
			version = conn.ConnectionState().Version
			_ = conn.Close()
		}
		return version, err, <-results
	}

	for _, tc := range []struct {
		name       string
		serverMin  uint16
		clientMin  uint16
		clientMax  uint16
		untrusted  bool
		wantOK     bool
		wantServer string // substring of the server-side error
	}{
		{"min 1.3, client max 1.2", tls.VersionTLS13, tls.VersionTLS12, tls.VersionTLS12, false, false, "unsupported versions"},
		{"min 1.3, client 1.3", tls.VersionTLS13, tls.VersionTLS13, tls.VersionTLS13, false, true, ""},
		{"min 1.3, client 1.1", tls.VersionTLS13, tls.VersionTLS11, tls.VersionTLS11, false, false, "unsupported versions"},
		{"min 1.2, client 1.2", tls.VersionTLS12, tls.VersionTLS12, tls.VersionTLS12, false, true, ""},
		{"min 1.2, client 1.1", tls.VersionTLS12, tls.VersionTLS11, tls.VersionTLS11, false, false, "unsupported versions"},
		{"min 1.3, client without ca.crt", tls.VersionTLS13, tls.VersionTLS13, tls.VersionTLS13, true, false, "bad certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, results := serve(t, TLSOptions(tlsconfig.Server{MinVersion: tc.serverMin}, srv.GetCertificate))
			trust := roots
			if tc.untrusted {
				trust = x509.NewCertPool()
			}
			version, clientErr, serverErr := dial(addr, results, tc.clientMin, tc.clientMax, trust)
			if tc.wantOK {
				if clientErr != nil || serverErr != nil {
					t.Fatalf("handshake failed: client %v, server %v", clientErr, serverErr)
				}
				if version != tc.clientMax {
					t.Errorf("negotiated %#x, want %#x", version, tc.clientMax)
				}
				return
			}
			if clientErr == nil {
				t.Fatal("handshake succeeded, want failure")
			}
			if serverErr == nil || !strings.Contains(serverErr.Error(), tc.wantServer) {
				t.Errorf("server error = %v, want it to mention %q", serverErr, tc.wantServer)
			}
		})
	}
}
