// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	testNS     = "ipkeeper-system"
	testSecret = "ipkeeper-webhook-certs"
	testWHC    = "ipkeeper-webhook"
	day        = 24 * time.Hour
)

var testDNSNames = []string{"ipkeeper-webhook", "ipkeeper-webhook.ipkeeper-system", "ipkeeper-webhook.ipkeeper-system.svc"}

// clock is a manually advanced time source.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

type env struct {
	t     *testing.T
	c     client.Client
	r     *Rotator
	clock *clock
}

func newWHC(webhooks int) *admissionregistrationv1.MutatingWebhookConfiguration {
	whc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: testWHC}}
	for i := range webhooks {
		whc.Webhooks = append(whc.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:                    string(rune('a'+i)) + ".ipkeeper.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: testNS, Name: "ipkeeper-webhook"},
			},
		})
	}
	return whc
}

// newEnv builds a Rotator over a fake client holding objs. funcs, when not
// zero, intercept client calls.
func newEnv(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *env {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()
	clk := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	return &env{t: t, c: c, clock: clk, r: &Rotator{Client: c, Options: Options{
		SecretNamespace:   testNS,
		SecretName:        testSecret,
		WebhookConfigName: testWHC,
		DNSNames:          testDNSNames,
		IPAddresses:       []net.IP{net.ParseIP("127.0.0.1")},
		Now:               clk.Now,
	}}}
}

func (e *env) reconcile() reconcile.Result {
	e.t.Helper()
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{})
	if err != nil {
		e.t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (e *env) secret() *corev1.Secret {
	e.t.Helper()
	s := &corev1.Secret{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: testSecret}, s); err != nil {
		e.t.Fatalf("get secret: %v", err)
	}
	return s
}

func (e *env) whc() *admissionregistrationv1.MutatingWebhookConfiguration {
	e.t.Helper()
	w := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Name: testWHC}, w); err != nil {
		e.t.Fatalf("get webhook configuration: %v", err)
	}
	return w
}

func (e *env) update(obj client.Object) {
	e.t.Helper()
	if err := e.c.Update(context.Background(), obj); err != nil {
		e.t.Fatalf("update %T: %v", obj, err)
	}
}

func leafOf(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(s.Data[TLSCertKey])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parse tls.crt: %v", err)
	}
	return c
}

func bundleOf(t *testing.T, pemBytes []byte) []*x509.Certificate {
	t.Helper()
	certs := parseCerts(pemBytes)
	if len(certs) == 0 {
		t.Fatal("CA bundle holds no certificate")
	}
	return certs
}

// verify checks leaf against roots for every configured SAN at now.
func verify(t *testing.T, leaf *x509.Certificate, roots []*x509.Certificate, now time.Time, dnsNames []string, ips []net.IP) {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	names := append([]string(nil), dnsNames...)
	for _, ip := range ips {
		names = append(names, ip.String())
	}
	for _, n := range names {
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:       pool,
			DNSName:     n,
			CurrentTime: now,
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			t.Errorf("serving certificate (serial %s) does not verify for %q: %v", leaf.SerialNumber, n, err)
		}
	}
}
