// SPDX-License-Identifier: Apache-2.0

package install

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// cnaoTLS is the TLS command line CNAO and HCO give their components
// (OpenShift's Intermediate profile: component-base's version name, the
// cipher suites in IANA names, curves by crypto/tls's names).
var cnaoTLS = []string{
	"--tls-min-version=VersionTLS12",
	"--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256," +
		"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384," +
		"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
	"--tls-curve-preferences=X25519,P-256",
}

// TestCNAOCommandLineStartsBothDaemons: ipkeeper-controller and
// ipkeeper-agent, the built binaries run as processes, start and get ready
// with the TLS flags as CNAO and HCO pass them. Every TLS server of both
// (the controller's webhook and /metrics, the agent's /metrics) serves a
// TLS 1.2 client, and never negotiates HTTP/2: a client offering only h2
// is refused, one offering h2 and http/1.1 gets http/1.1. With
// --enable-http2 added, each negotiates h2.
func TestCNAOCommandLineStartsBothDaemons(t *testing.T) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := framework.BuildBinaries(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pki := t.TempDir()
	if err := framework.WriteTestPKI(pki); err != nil {
		t.Fatal(err)
	}
	const ns = "cnao-tls"
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})

	for _, http2 := range []bool{false, true} {
		args := slices.Clone(cnaoTLS)
		if http2 {
			args = append(args, "--enable-http2")
		}
		args = append(args, "--metrics-cert-dir="+pki)
		name := "without --enable-http2"
		if http2 {
			name = "with --enable-http2"
		}
		t.Run(name, func(t *testing.T) {
			servers := startTLSDaemons(t, bins, ns, args)
			for what, addr := range servers {
				checkALPN(t, what, addr, http2)
			}
		})
	}
}

// startTLSDaemons starts one controller and one agent process with args
// appended and returns their TLS servers' addresses once both are ready.
func startTLSDaemons(t *testing.T, bins *framework.Binaries, ns string, args []string) map[string]string {
	t.Helper()
	ctx := context.Background()
	ctrl, err := framework.StartControllerProcess(framework.ControllerProcessOptions{
		Binary: bins.Controller, Kubeconfig: cp.KubeconfigPath, Dir: t.TempDir(), Namespace: ns,
		WebhookConfigName: "ipkeeper-cnao-tls", GCGracePeriod: time.Hour, ExtraArgs: args,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	if err := ctrl.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatalf("ipkeeper-controller %s: %v\n%s", strings.Join(args, " "), err, ctrl.Tail(40))
	}
	// A short directory: the agent's socket path has a length limit.
	dir, err := os.MkdirTemp("", "ipk-cnao-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	agent, err := framework.StartAgentProcess(framework.AgentProcessOptions{
		Binary: bins.Agent, Kubeconfig: cp.KubeconfigPath, NodeName: "cnao-tls-node", Dir: dir, ExtraArgs: args,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Stop() })
	if err := agent.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatalf("ipkeeper-agent %s: %v\n%s", strings.Join(args, " "), err, agent.Tail(40))
	}
	return map[string]string{
		"controller webhook":  net.JoinHostPort("127.0.0.1", strconv.Itoa(ctrl.WebhookPort)),
		"controller /metrics": ctrl.MetricsAddr,
		"agent /metrics":      agent.MetricsAddr,
	}
}

// checkALPN checks what a server at addr negotiates: h2 only when
// http2, http/1.1 otherwise; and a TLS 1.2 client is served.
func checkALPN(t *testing.T, what, addr string, http2 bool) {
	t.Helper()
	// The handshake, not the certificate, is what is checked here
	// (security_tls_test.go and tlsconfig's tests check the trust).
	dial := func(c *tls.Config) (tls.ConnectionState, error) {
		c.InsecureSkipVerify = true
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, c)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState(), nil
	}
	if st, err := dial(&tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}); err != nil || st.Version != tls.VersionTLS12 {
		t.Errorf("%s: a TLS 1.2 client with a listed suite: version %#x, %v", what, st.Version, err)
	}
	st, err := dial(&tls.Config{NextProtos: []string{"h2"}})
	switch {
	case http2 && (err != nil || st.NegotiatedProtocol != "h2"):
		t.Errorf("%s with --enable-http2: a client offering only h2 negotiated %q, %v; want h2", what, st.NegotiatedProtocol, err)
	case !http2 && (err == nil || !strings.Contains(err.Error(), "no application protocol")):
		t.Errorf("%s: a client offering only h2: negotiated %q, %v; want it refused (no application protocol)", what, st.NegotiatedProtocol, err)
	}
	if !http2 {
		if st, err := dial(&tls.Config{NextProtos: []string{"h2", "http/1.1"}}); err != nil || st.NegotiatedProtocol != "http/1.1" {
			t.Errorf("%s: a client offering h2 and http/1.1 negotiated %q, %v; want http/1.1", what, st.NegotiatedProtocol, err)
		}
	}
}
