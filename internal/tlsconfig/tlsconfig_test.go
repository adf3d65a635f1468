// SPDX-License-Identifier: Apache-2.0

package tlsconfig

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint16
	}{
		{"1.2", tls.VersionTLS12},
		{"1.3", tls.VersionTLS13},
		{"VersionTLS12", tls.VersionTLS12},
		{"VersionTLS13", tls.VersionTLS13},
		{"1.0", 0},
		{"1.1", 0},
		{"VersionTLS10", 0},
		{"VersionTLS11", 0},
		{"", 0},
		{"TLS1.3", 0},
		{"versiontls12", 0},
		{"1.4", 0},
	} {
		got, err := ParseVersion("tls-min-version", tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("ParseVersion(%q) accepted", tc.in)
			} else if want := `invalid --tls-min-version "` + tc.in + `": must be VersionTLS12 or VersionTLS13 (or 1.2 or 1.3)`; err.Error() != want {
				t.Errorf("ParseVersion(%q) error %q, want %q", tc.in, err, want)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseVersion(%q) = %#x, %v; want %#x", tc.in, got, err, tc.want)
		}
	}
}

func TestParseCipherSuites(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []uint16
		wantErr []string // substrings of the error; nil: no error
	}{
		{"empty: Go's defaults", "", nil, nil},
		{"blank: Go's defaults", "  ", nil, nil},
		{"two TLS 1.2 suites, spaces trimmed", " TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 ,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}, nil},
		{"a TLS 1.3 suite is accepted and left out", "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}, nil},
		{"TLS 1.3 suites only", "TLS_AES_256_GCM_SHA384", []uint16{}, nil},
		{"duplicates once", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}, nil},
		{"insecure", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_SHA", nil,
			[]string{"--tls-cipher-suites", `"TLS_RSA_WITH_RC4_128_SHA"`, "insecure"}},
		{"insecure RSA key exchange", "TLS_RSA_WITH_AES_128_GCM_SHA256", nil,
			[]string{"--tls-cipher-suites", `"TLS_RSA_WITH_AES_128_GCM_SHA256"`, "insecure"}},
		{"unknown", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-RSA-AES128-GCM-SHA256", nil,
			[]string{"--tls-cipher-suites", `unknown cipher suite "ECDHE-RSA-AES128-GCM-SHA256"`, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}},
		{"empty element", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,,", nil,
			[]string{`--tls-cipher-suites "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,,"`, "empty name"}},
		{"component-base's legacy CHACHA20 name", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
			[]uint16{tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCipherSuites(FlagCipherSuites, tc.in)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("accepted: %v", got)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, name := range SecureTLS12Names() {
		if _, err := ParseCipherSuites(FlagCipherSuites, name); err != nil {
			t.Errorf("a name SecureTLS12Names lists is refused: %v", err)
		}
	}
}

// parse registers the flags as the controller does and parses args;
// notices are what the flags printed.
func parse(t *testing.T, args ...string) (o Options, notices string) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	o.AddFlags(fs, "the servers")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o, out.String()
}

func TestOptionsParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    Server
		wantErr []string
	}{
		{"defaults: today's TLS 1.3 and Go's suites", nil, Server{MinVersion: tls.VersionTLS13}, nil},
		{"1.2 with suites", []string{"--tls-min-version=1.2", "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
			Server{MinVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, nil},
		{"1.3 with suites: accepted, they only matter for 1.2", []string{"--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
			Server{MinVersion: tls.VersionTLS13, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, nil},
		{"1.2 with TLS 1.3 suites only", []string{"--tls-min-version=1.2", "--tls-cipher-suites=TLS_AES_128_GCM_SHA256"},
			Server{}, []string{`--tls-cipher-suites "TLS_AES_128_GCM_SHA256"`, "no TLS 1.2 suite"}},
		{"bad version", []string{"--tls-min-version=1.1"}, Server{}, []string{`invalid --tls-min-version "1.1"`}},
		{"component-base's names", []string{"--tls-min-version=VersionTLS12", "--tls-curve-preferences=X25519, P-256,X25519,CurveP384,X25519MLKEM768,CurveP256,secp521r1", "--enable-http2"},
			Server{MinVersion: tls.VersionTLS12, CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.X25519MLKEM768, tls.CurveP521}, EnableHTTP2: true}, nil},
		{"unknown curve", []string{"--tls-curve-preferences=X25519,P-224"}, Server{},
			[]string{`invalid --tls-curve-preferences: unknown curve "P-224"`, "P-256"}},
		{"empty curve", []string{"--tls-curve-preferences=X25519,"}, Server{},
			[]string{`invalid --tls-curve-preferences "X25519,": empty name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, notices := parse(t, tc.args...)
			if notices != "" {
				t.Errorf("the flags printed %q", notices)
			}
			s, err := o.Parse()
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("accepted: %+v", s)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.MinVersion != tc.want.MinVersion || !slices.Equal(s.CipherSuites, tc.want.CipherSuites) ||
				!slices.Equal(s.CurvePreferences, tc.want.CurvePreferences) || s.EnableHTTP2 != tc.want.EnableHTTP2 {
				t.Errorf("got %+v, want %+v", s, tc.want)
			}
		})
	}
}

// selfSigned writes an ECDSA certificate for 127.0.0.1 and its key into
// dir and returns the certificate (ECDSA: RSA keys take seconds to make).
func selfSigned(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "ipkeeper-test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// The key first: the watcher reloads on the certificate's write too,
	// and a pair that does not match is not taken.
	if err := os.WriteFile(filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// newServer starts an HTTPS test server whose TLS settings come from
// parsing args as the daemons do, with the certificate of dir.
func newServer(t *testing.T, dir string, args ...string) *httptest.Server {
	t.Helper()
	o, _ := parse(t, args...)
	s, err := o.Parse()
	if err != nil {
		t.Fatal(err)
	}
	w, err := WatchCertDir("metrics-cert-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	// Not StartTLS: it would put its own certificate first.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.Listener = tls.NewListener(srv.Listener, s.Config(w.GetCertificate))
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("certificate watcher: %v", err)
		}
	})
	return srv
}

// handshake dials srv with a client limited to the versions and suites
// given (suites nil: Go's) and returns the connection state.
func handshake(srv *httptest.Server, roots *x509.CertPool, minV, maxV uint16, suites []uint16) (tls.ConnectionState, error) {
	return dial(srv, &tls.Config{RootCAs: roots, MinVersion: minV, MaxVersion: maxV, CipherSuites: suites})
}

// dial makes a TLS handshake with srv as c says and returns the
// connection state.
func dial(srv *httptest.Server, c *tls.Config) (tls.ConnectionState, error) {
	c.ServerName = "127.0.0.1"
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), c)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState(), nil
}

// cnao is a command line as CNAO and HCO give their components (here
// OpenShift's Intermediate profile, its cipher suites in IANA names, the
// curves by crypto/tls's constant names).
var cnao = []string{
	"--tls-min-version=VersionTLS12",
	"--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256," +
		"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384," +
		"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
	"--tls-curve-preferences=X25519,CurveP256",
}

// TestCNAOCommandLine: a server built from a CNAO-style command line
// refuses a TLS 1.1 client and serves TLS 1.2 with a listed suite; it
// never negotiates HTTP/2 (a client offering only h2 is refused, a real
// HTTP/2-only client fails) unless --enable-http2 is added, when both get
// h2; and it honours the curves: a client offering only P-256 connects
// while the list has P-256 and is refused when it has only X25519.
func TestCNAOCommandLine(t *testing.T) {
	dir := t.TempDir()
	roots := x509.NewCertPool()
	roots.AddCert(selfSigned(t, dir))
	p256 := func(v uint16) *tls.Config {
		return &tls.Config{RootCAs: roots, MinVersion: v, MaxVersion: v, CurvePreferences: []tls.CurveID{tls.CurveP256}}
	}

	srv := newServer(t, dir, cnao...)
	if _, err := handshake(srv, roots, tls.VersionTLS11, tls.VersionTLS11, nil); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 client: %v, want a protocol version error", err)
	}
	if st, err := handshake(srv, roots, tls.VersionTLS12, tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}); err != nil || st.Version != tls.VersionTLS12 {
		t.Errorf("TLS 1.2 client with a listed suite: version %#x, %v", st.Version, err)
	}
	if _, err := dial(srv, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}}); err == nil || !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("client offering only h2: %v, want no application protocol", err)
	}
	if st, err := dial(srv, &tls.Config{RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}}); err != nil || st.NegotiatedProtocol != "http/1.1" {
		t.Errorf("client offering h2 and http/1.1: negotiated %q, %v; want http/1.1", st.NegotiatedProtocol, err)
	}
	if proto, err := getHTTP2(srv, roots); err == nil {
		t.Errorf("an HTTP/2-only client got a response over %s without --enable-http2", proto)
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if _, err := dial(srv, p256(v)); err != nil {
			t.Errorf("TLS %#x client offering only P-256, P-256 listed: %v", v, err)
		}
	}

	h2 := newServer(t, dir, append(slices.Clone(cnao), "--enable-http2")...)
	if st, err := dial(h2, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}}); err != nil || st.NegotiatedProtocol != "h2" {
		t.Errorf("--enable-http2, client offering only h2: negotiated %q, %v; want h2", st.NegotiatedProtocol, err)
	}
	if proto, err := getHTTP2(h2, roots); err != nil || proto != "HTTP/2.0" {
		t.Errorf("--enable-http2, an HTTP/2-only client: %q, %v", proto, err)
	}

	x25519 := newServer(t, dir, "--tls-min-version=VersionTLS12", "--tls-curve-preferences=X25519")
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if _, err := dial(x25519, p256(v)); err == nil {
			t.Errorf("TLS %#x client offering only P-256 connected to a server listing only X25519", v)
		}
	}
	// The control: the same server takes a client offering X25519.
	if _, err := dial(x25519, &tls.Config{RootCAs: roots, CurvePreferences: []tls.CurveID{tls.X25519}}); err != nil {
		t.Errorf("client offering X25519 to a server listing X25519: %v", err)
	}
}

// getHTTP2 GETs / from srv with a client that speaks only HTTP/2 and
// returns the response's protocol.
func getHTTP2(srv *httptest.Server, roots *x509.CertPool) (string, error) {
	var protos http.Protocols
	protos.SetHTTP2(true)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, Protocols: &protos,
	}}
	resp, err := c.Get("https://" + srv.Listener.Addr().String() + "/")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.Proto, nil
}

// TestServersApplyTheOptions: a server built from the options refuses TLS
// 1.2 when the minimum is 1.3, and a TLS 1.2 client whose suites are not
// in --tls-cipher-suites, while the same clients connect otherwise.
func TestServersApplyTheOptions(t *testing.T) {
	dir := t.TempDir()
	roots := x509.NewCertPool()
	roots.AddCert(selfSigned(t, dir))
	const listed, unlisted = tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384

	defaults := newServer(t, dir)
	if _, err := handshake(defaults, roots, tls.VersionTLS12, tls.VersionTLS12, nil); err == nil {
		t.Error("default (minimum TLS 1.3): a TLS 1.2 client connected")
	} else if !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("default: TLS 1.2 client refused for another reason than the version: %v", err)
	}
	if st, err := handshake(defaults, roots, tls.VersionTLS13, tls.VersionTLS13, nil); err != nil || st.Version != tls.VersionTLS13 {
		t.Errorf("default: TLS 1.3 client: version %#x, %v", st.Version, err)
	}

	explicit13 := newServer(t, dir, "--tls-min-version=1.3")
	if _, err := handshake(explicit13, roots, tls.VersionTLS12, tls.VersionTLS12, nil); err == nil {
		t.Error("--tls-min-version=1.3: a TLS 1.2 client connected")
	}

	only := newServer(t, dir, "--tls-min-version=1.2", "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
	if _, err := handshake(only, roots, tls.VersionTLS12, tls.VersionTLS12, []uint16{unlisted}); err == nil {
		t.Error("a TLS 1.2 client offering only a suite not in --tls-cipher-suites connected")
	} else if !strings.Contains(err.Error(), "handshake failure") {
		t.Errorf("unlisted suite refused for another reason than the suite: %v", err)
	}
	st, err := handshake(only, roots, tls.VersionTLS12, tls.VersionTLS12, []uint16{unlisted, listed})
	if err != nil {
		t.Fatalf("a TLS 1.2 client offering the listed suite: %v", err)
	}
	if st.Version != tls.VersionTLS12 || st.CipherSuite != listed {
		t.Errorf("negotiated %#x / %s, want TLS 1.2 / %s", st.Version, tls.CipherSuiteName(st.CipherSuite), tls.CipherSuiteName(listed))
	}
	// TLS 1.3 is unaffected by the list.
	if _, err := handshake(only, roots, tls.VersionTLS13, tls.VersionTLS13, nil); err != nil {
		t.Errorf("TLS 1.3 client with --tls-cipher-suites set: %v", err)
	}

	// The control: without the list, the same client's suite is accepted,
	// so the refusal above came from --tls-cipher-suites.
	any12 := newServer(t, dir, "--tls-min-version=1.2")
	if _, err := handshake(any12, roots, tls.VersionTLS12, tls.VersionTLS12, []uint16{unlisted}); err != nil {
		t.Errorf("--tls-min-version=1.2 without a list: %v", err)
	}
}

// TestWatchCertDirReloads: a certificate replaced in the directory (as a
// renewed, mounted Secret) is served without a restart.
func TestWatchCertDirReloads(t *testing.T) {
	dir := t.TempDir()
	first := selfSigned(t, dir)
	srv := newServer(t, dir)
	served := func() (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return nil, err
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	got, err := served()
	if err != nil || !got.Equal(first) {
		t.Fatalf("served %v, %v; want the first certificate", got, err)
	}
	second := selfSigned(t, dir)
	deadline := time.Now().Add(30 * time.Second) // the watcher also polls every 10 s
	for {
		got, err = served()
		if err == nil && got.Equal(second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving the first certificate (%v) 30 s after it was replaced", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWatchCertDirErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := WatchCertDir("metrics-cert-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "--metrics-cert-dir "+dir) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty directory: %v, want an error naming the flag and directory", err)
	}
}

// TestZeroServerIsTheDefaults: a Server nobody filled (an agent.Options
// built in code) applies what the flags default to, never Go's TLS 1.2.
func TestZeroServerIsTheDefaults(t *testing.T) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}
	Server{}.Apply(c)
	if c.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %#x, want TLS 1.3", c.MinVersion)
	}
	if got := (Server{}).Config(nil); got.MinVersion != tls.VersionTLS13 || got.CipherSuites != nil || got.CurvePreferences != nil ||
		!slices.Equal(got.NextProtos, []string{"http/1.1"}) {
		t.Errorf("Config() = min %#x, suites %v, curves %v, ALPN %q; want TLS 1.3, Go's suites and curves, HTTP/1.1 only",
			got.MinVersion, got.CipherSuites, got.CurvePreferences, got.NextProtos)
	}
	o, _ := parse(t)
	s, err := o.Parse()
	if err != nil || s.MinVersion != tls.VersionTLS13 || s.CipherSuites != nil {
		t.Errorf("the flags' defaults parse to %+v, %v", s, err)
	}
}
