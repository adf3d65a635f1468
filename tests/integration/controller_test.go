// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/certs"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Self-managed certificates: the Secret is made, its CA is what the API
// server trusts (the webhook works, see StartController), a cleared
// caBundle is put back, and TLS below the configured minimum is refused.
func TestWebhookCertificatesAndTLS(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	o := e.ctrl.Options

	var secret corev1.Secret
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: o.SecretName}, &secret); err != nil {
		t.Fatalf("webhook Secret: %v", err)
	}
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: o.WebhookConfig}, &whc); err != nil {
		t.Fatal(err)
	}
	if string(whc.Webhooks[0].ClientConfig.CABundle) != string(secret.Data[certs.CACertKey]) {
		t.Fatal("injected caBundle differs from the Secret's ca.crt")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data[certs.CACertKey]) {
		t.Fatal("ca.crt holds no certificate")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", o.WebhookPort)
	dial := func(minV, maxV uint16) error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: minV, MaxVersion: maxV})
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
	if err := dial(tls.VersionTLS13, tls.VersionTLS13); err != nil {
		t.Errorf("TLS 1.3 client trusting the CA: %v", err)
	}
	if err := dial(tls.VersionTLS12, tls.VersionTLS12); err == nil {
		t.Error("default minimum is TLS 1.3, yet a TLS 1.2 client connected")
	}

	// Someone re-applies the manifest and wipes the caBundle (again after a
	// conflict: the controller writes the configuration's scope too).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: o.WebhookConfig}, &whc); err != nil {
			return err
		}
		whc.Webhooks[0].ClientConfig.CABundle = nil
		return cp.Client.Update(ctx, &whc)
	}); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: o.WebhookConfig}, &whc); err != nil {
			return false, err
		}
		return string(whc.Webhooks[0].ClientConfig.CABundle) == string(secret.Data[certs.CACertKey]), nil
	}); err != nil {
		t.Fatalf("caBundle not re-injected: %v", err)
	}

	// Operators who need TLS 1.2 clients can lower the minimum, not below 1.2.
	lowered := startKubeVirtEnv(t, func(o *manager.Options) { o.TLS.MinVersion = "1.2" })
	addr = fmt.Sprintf("127.0.0.1:%d", lowered.ctrl.Options.WebhookPort)
	if err := lowered.dialTLS(addr, tls.VersionTLS12); err != nil {
		t.Errorf("--tls-min-version 1.2: TLS 1.2 client refused: %v", err)
	}
	if err := lowered.dialTLS(addr, tls.VersionTLS11); err == nil {
		t.Error("a TLS 1.1 client connected")
	}
	bad := manager.Options{}
	bad.AddFlags(newFlags())
	bad.TLS.MinVersion = "1.1"
	if err := bad.Validate(); err == nil || !containsAll(err.Error(), "--tls-min-version", `"1.1"`) {
		t.Errorf("Validate() with TLS 1.1 = %v, want an error naming the flag and value", err)
	}
}

func (e *kvEnv) dialTLS(addr string, version uint16) error {
	var secret corev1.Secret
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: e.ctrl.Options.SecretName}, &secret); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data[certs.CACertKey]) {
		return errors.New("no CA")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: version, MaxVersion: version})
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// Two replicas: one leads; when it stops, the other takes the lease and
// creates claims.
func TestLeaderElectionFailover(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	e.nad(t, "blue", bridgeNAD("le-blue", true))
	leaseKey := client.ObjectKey{Namespace: e.ns, Name: e.ctrl.Options.LeaderElectID}
	var lease coordinationv1.Lease
	if err := cp.Client.Get(ctx, leaseKey, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("no leader lease: %v", err)
	}
	first := *lease.Spec.HolderIdentity

	standby := cp.StartController(t, e.ns, func(o *manager.Options) { o.EnableWebhook = false })
	// Cleanups run last first: the test's VMs settle while the standby,
	// the leader by then, still runs.
	t.Cleanup(func() { e.settle(t) })
	e.ctrl.Stop()
	var second string
	// The stopped leader gives the lease up once its controllers have
	// stopped (up to the manager's 30s graceful shutdown), or it expires
	// 15s after its last renewal; on a loaded machine both stretch.
	if err := framework.Eventually(ctx, 2*time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, leaseKey, &lease); err != nil {
			return false, err
		}
		second = ""
		if lease.Spec.HolderIdentity != nil {
			second = *lease.Spec.HolderIdentity
		}
		return second != "" && second != first, nil
	}); err != nil {
		t.Fatalf("standby never took the lease from %s: %v (lease now: holder %q, renewed %v, duration %vs, transitions %v; standby: %v)",
			first, err, second, lease.Spec.RenewTime, ptr.Deref(lease.Spec.LeaseDurationSeconds, 0), ptr.Deref(lease.Spec.LeaseTransitions, 0), standby.Exited())
	}
	if _, err := e.kv.CreateVM(ctx, e.ns, "after-failover", framework.VMNetwork{Name: "blue", NAD: "blue"}); err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "after-failover.blue")
}

// Provided certificates (cert-manager style): the controller serves what
// is mounted in --webhook-cert-dir, and the API server, given that CA, calls
// it. StartController fails unless the API server reaches the webhook.
func TestWebhookWithProvidedCertificates(t *testing.T) {
	dir := t.TempDir()
	if err := framework.WriteTestPKI(dir); err != nil {
		t.Fatal(err)
	}
	e := startKubeVirtEnv(t, func(o *manager.Options) {
		o.CertMode, o.CertDir = manager.CertsProvided, dir
	})
	var secret corev1.Secret
	err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: e.ctrl.Options.SecretName}, &secret)
	if err == nil {
		t.Error("provided mode created a self-managed Secret")
	}
	if err := dialWithCA(fmt.Sprintf("127.0.0.1:%d", e.ctrl.Options.WebhookPort), filepath.Join(dir, "ca.crt"), tls.VersionTLS12); err == nil {
		t.Error("provided mode accepted TLS 1.2 with the default minimum 1.3")
	}
}

func dialWithCA(addr, caFile string, version uint16) error {
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: version, MaxVersion: version})
	if err == nil {
		_ = conn.Close()
	}
	return err
}
