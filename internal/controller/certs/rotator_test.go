// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestFirstReconcileCreatesSecretAndInjects(t *testing.T) {
	e := newEnv(t, nil, newWHC(2))
	res := e.reconcile()
	if res.RequeueAfter != maxRequeue {
		t.Errorf("RequeueAfter = %v, want the %v cap for fresh certificates", res.RequeueAfter, maxRequeue)
	}

	s := e.secret()
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("secret type = %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	for _, k := range []string{CACertKey, CAKeyKey, TLSCertKey, TLSKeyKey} {
		if len(s.Data[k]) == 0 {
			t.Errorf("secret key %s is empty", k)
		}
	}
	cas := bundleOf(t, s.Data[CACertKey])
	if len(cas) != 1 || !cas[0].IsCA {
		t.Fatalf("ca.crt holds %d certificates (first IsCA=%v), want one CA", len(cas), cas[0].IsCA)
	}
	caKey, err := parsePrivateKey(s.Data[CAKeyKey])
	if err != nil || !keyMatches(cas[0], caKey) {
		t.Fatalf("ca.key does not match ca.crt (err=%v)", err)
	}
	if k, ok := caKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", caKey)
	}
	if got := cas[0].NotAfter.Sub(e.clock.Now()); got != DefaultCAValidity {
		t.Errorf("CA validity = %v, want %v", got, DefaultCAValidity)
	}

	leaf := leafOf(t, s)
	if leaf.Subject.CommonName != testDNSNames[0] {
		t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, testDNSNames[0])
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("ExtKeyUsage = %v, want [ServerAuth]", leaf.ExtKeyUsage)
	}
	if got := leaf.NotAfter.Sub(e.clock.Now()); got != DefaultCertValidity {
		t.Errorf("serving cert validity = %v, want %v", got, DefaultCertValidity)
	}
	verify(t, leaf, cas, e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)

	whc := e.whc()
	if len(whc.Webhooks) != 2 {
		t.Fatalf("webhooks = %d, want 2", len(whc.Webhooks))
	}
	for _, wh := range whc.Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, s.Data[CACertKey]) {
			t.Errorf("webhook %s caBundle differs from ca.crt", wh.Name)
		}
	}
}

func TestSecondReconcileIsNoop(t *testing.T) {
	writes := 0
	e := newEnv(t, &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, p, opts...)
		},
	}, newWHC(2))
	e.reconcile()
	if writes != 2 {
		t.Errorf("first reconcile made %d writes, want 2 (create secret, inject)", writes)
	}
	secretRV, whcRV := e.secret().ResourceVersion, e.whc().ResourceVersion

	writes = 0
	e.clock.Advance(time.Hour)
	e.reconcile()
	if writes != 0 {
		t.Errorf("steady-state reconcile made %d writes, want 0", writes)
	}
	if rv := e.secret().ResourceVersion; rv != secretRV {
		t.Errorf("secret resourceVersion changed %s -> %s on a steady-state reconcile", secretRV, rv)
	}
	if rv := e.whc().ResourceVersion; rv != whcRV {
		t.Errorf("webhook configuration resourceVersion changed %s -> %s on a steady-state reconcile", whcRV, rv)
	}
}

func TestServingCertRotation(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	before := e.secret()
	oldLeaf := leafOf(t, before)

	// Just before 2/3 of the lifetime: nothing happens, and the requeue
	// points at the rotation instant (capped).
	e.clock.t = rotationPoint(oldLeaf).Add(-30 * time.Minute)
	if res := e.reconcile(); res.RequeueAfter != 30*time.Minute {
		t.Errorf("RequeueAfter = %v, want 30m until the rotation point", res.RequeueAfter)
	}
	if e.secret().ResourceVersion != before.ResourceVersion {
		t.Fatal("serving certificate rotated before 2/3 of its lifetime")
	}

	e.clock.t = rotationPoint(oldLeaf).Add(time.Minute)
	e.reconcile()
	after := e.secret()
	newLeaf := leafOf(t, after)
	if newLeaf.SerialNumber.Cmp(oldLeaf.SerialNumber) == 0 {
		t.Fatal("serving certificate not rotated past 2/3 of its lifetime")
	}
	if !bytes.Equal(after.Data[CACertKey], before.Data[CACertKey]) || !bytes.Equal(after.Data[CAKeyKey], before.Data[CAKeyKey]) {
		t.Error("CA changed on a serving certificate rotation")
	}
	if bytes.Equal(after.Data[TLSKeyKey], before.Data[TLSKeyKey]) {
		t.Error("serving key reused on rotation")
	}
	verify(t, newLeaf, bundleOf(t, after.Data[CACertKey]), e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)
}

func TestCARotationIsTwoPhase(t *testing.T) {
	e := newEnv(t, nil, newWHC(2))
	e.r.Options.CAValidity = 30 * day
	e.r.Options.CertValidity = 10 * day
	t0 := e.clock.Now()
	e.reconcile()
	oldCA := bundleOf(t, e.secret().Data[CACertKey])[0]

	// Keep the serving certificate fresh on the way to the CA's window so
	// only the CA is due when we get there.
	for _, d := range []time.Duration{8 * day, 16 * day} {
		e.clock.t = t0.Add(d)
		e.reconcile()
	}
	if got := bundleOf(t, e.secret().Data[CACertKey]); len(got) != 1 || !got[0].Equal(oldCA) {
		t.Fatal("CA changed before its rotation window")
	}

	// Phase 1: new CA, bundle = new + old, serving certificate unchanged.
	e.clock.t = t0.Add(21 * day)
	before := e.secret()
	oldLeaf := leafOf(t, before)
	res := e.reconcile()
	phase1 := e.secret()
	bundle := bundleOf(t, phase1.Data[CACertKey])
	if len(bundle) != 2 {
		t.Fatalf("bundle holds %d CAs after CA rotation, want 2", len(bundle))
	}
	newCA := bundle[0]
	if newCA.Equal(oldCA) || !bundle[1].Equal(oldCA) {
		t.Fatal("bundle is not [new CA, old CA]")
	}
	caKey, err := parsePrivateKey(phase1.Data[CAKeyKey])
	if err != nil || !keyMatches(newCA, caKey) {
		t.Fatalf("ca.key is not the new CA's key (err=%v)", err)
	}
	if !bytes.Equal(phase1.Data[TLSCertKey], before.Data[TLSCertKey]) || !bytes.Equal(phase1.Data[TLSKeyKey], before.Data[TLSKeyKey]) {
		t.Fatal("serving certificate replaced before the new CA was injected")
	}
	if res.RequeueAfter != minRequeue {
		t.Errorf("RequeueAfter = %v, want %v while the serving certificate waits for the new CA", res.RequeueAfter, minRequeue)
	}
	for _, wh := range e.whc().Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, phase1.Data[CACertKey]) {
			t.Errorf("webhook %s caBundle not updated to the two-CA bundle", wh.Name)
		}
	}
	verify(t, oldLeaf, bundle, e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)

	// Phase 2: the configuration now trusts the new CA, so re-issue.
	e.reconcile()
	phase2 := e.secret()
	newLeaf := leafOf(t, phase2)
	if newLeaf.SerialNumber.Cmp(oldLeaf.SerialNumber) == 0 {
		t.Fatal("serving certificate not re-issued after the new CA was injected")
	}
	if !bytes.Equal(phase2.Data[CACertKey], phase1.Data[CACertKey]) {
		t.Error("bundle changed in phase 2")
	}
	verify(t, newLeaf, bundle[:1], e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)
	// During the transition both certificates verify against the bundle.
	verify(t, newLeaf, bundle, e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)
	verify(t, oldLeaf, bundle, e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)

	rv := phase2.ResourceVersion
	e.reconcile()
	if e.secret().ResourceVersion != rv {
		t.Error("reconcile after the CA rotation completed changed the secret")
	}

	// Once the old CA expires it leaves the bundle (and the caBundle).
	e.clock.t = t0.Add(28 * day) // serving certificate due again
	e.reconcile()
	if got := bundleOf(t, e.secret().Data[CACertKey]); len(got) != 2 {
		t.Fatalf("old CA dropped before expiry: bundle holds %d", len(got))
	}
	e.clock.t = oldCA.NotAfter.Add(time.Second)
	e.reconcile()
	final := e.secret()
	if got := bundleOf(t, final.Data[CACertKey]); len(got) != 1 || !got[0].Equal(newCA) {
		t.Fatalf("expired CA still in bundle (%d certificates)", len(got))
	}
	for _, wh := range e.whc().Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, final.Data[CACertKey]) {
			t.Errorf("webhook %s caBundle still holds the expired CA", wh.Name)
		}
	}
}

func TestBrokenCAKeyKeepsOldCATrusted(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	s := e.secret()
	oldLeaf := leafOf(t, s)
	s.Data[CAKeyKey] = []byte("not a key")
	e.update(s)

	e.reconcile()
	got := e.secret()
	bundle := bundleOf(t, got.Data[CACertKey])
	if len(bundle) != 2 {
		t.Fatalf("bundle holds %d CAs, want new + old", len(bundle))
	}
	if k, err := parsePrivateKey(got.Data[CAKeyKey]); err != nil || !keyMatches(bundle[0], k) {
		t.Fatalf("ca.key not replaced by the new CA's key (err=%v)", err)
	}
	if !bytes.Equal(got.Data[TLSCertKey], s.Data[TLSCertKey]) {
		t.Error("still-valid serving certificate replaced before the new CA was injected")
	}
	verify(t, oldLeaf, bundle, e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)
}

func TestCorruptServingCertIsRepaired(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	s := e.secret()
	caPEM, caKeyPEM := s.Data[CACertKey], s.Data[CAKeyKey]
	s.Data[TLSCertKey] = []byte("garbage")
	e.update(s)

	e.reconcile()
	got := e.secret()
	if !bytes.Equal(got.Data[CACertKey], caPEM) || !bytes.Equal(got.Data[CAKeyKey], caKeyPEM) {
		t.Error("valid CA replaced while repairing the serving certificate")
	}
	verify(t, leafOf(t, got), bundleOf(t, got.Data[CACertKey]), e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)
	if _, err := parseServing(got.Data[TLSCertKey], got.Data[TLSKeyKey]); err != nil {
		t.Errorf("repaired tls.crt/tls.key do not form a key pair: %v", err)
	}
}

func TestMismatchedServingKeyIsRepaired(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	s := e.secret()
	s.Data[TLSKeyKey] = s.Data[CAKeyKey] // a valid key, but not tls.crt's
	e.update(s)

	e.reconcile()
	got := e.secret()
	if _, err := parseServing(got.Data[TLSCertKey], got.Data[TLSKeyKey]); err != nil {
		t.Fatalf("mismatched key pair not repaired: %v", err)
	}
}

func TestMissingSANReissues(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	before := e.secret()

	e.r.Options.DNSNames = append(slices.Clone(testDNSNames), "ipkeeper-webhook.ipkeeper-system.svc.cluster.local")
	e.r.Options.IPAddresses = append(e.r.Options.IPAddresses, net.ParseIP("::1"))
	e.reconcile()
	after := e.secret()
	if bytes.Equal(after.Data[TLSCertKey], before.Data[TLSCertKey]) {
		t.Fatal("serving certificate not re-issued after a SAN was added")
	}
	if !bytes.Equal(after.Data[CACertKey], before.Data[CACertKey]) {
		t.Error("CA changed when only SANs changed")
	}
	verify(t, leafOf(t, after), bundleOf(t, after.Data[CACertKey]), e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)
}

func TestMissingWebhookConfiguration(t *testing.T) {
	e := newEnv(t, nil)
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{})
	if err != nil {
		t.Fatalf("Reconcile without webhook configuration: %v", err)
	}
	if res.RequeueAfter != 10*time.Second {
		t.Errorf("RequeueAfter = %v, want 10s", res.RequeueAfter)
	}
	s := e.secret() // the Secret is still managed
	verify(t, leafOf(t, s), bundleOf(t, s.Data[CACertKey]), e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)

	// Applied later: the next reconcile injects.
	if err := e.c.Create(context.Background(), newWHC(2)); err != nil {
		t.Fatal(err)
	}
	if res := e.reconcile(); res.RequeueAfter != maxRequeue {
		t.Errorf("RequeueAfter = %v once the configuration exists, want %v", res.RequeueAfter, maxRequeue)
	}
	for _, wh := range e.whc().Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, s.Data[CACertKey]) {
			t.Errorf("webhook %s not injected", wh.Name)
		}
	}
}

func TestClearedCABundleIsReinjected(t *testing.T) {
	e := newEnv(t, nil, newWHC(2))
	e.reconcile()
	secretRV := e.secret().ResourceVersion
	w := e.whc()
	w.Webhooks[1].ClientConfig.CABundle = nil
	e.update(w)

	e.reconcile()
	want := e.secret()
	if want.ResourceVersion != secretRV {
		t.Error("secret rewritten although only the caBundle was cleared")
	}
	for _, wh := range e.whc().Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, want.Data[CACertKey]) {
			t.Errorf("webhook %s caBundle not re-injected", wh.Name)
		}
	}
}

func TestWriteConflictsAreReturned(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	t.Run("create AlreadyExists", func(t *testing.T) {
		e := newEnv(t, &interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewAlreadyExists(gr, testSecret)
		}}, newWHC(1))
		_, err := e.r.Reconcile(context.Background(), reconcile.Request{})
		if !apierrors.IsAlreadyExists(err) {
			t.Fatalf("Reconcile error = %v, want AlreadyExists", err)
		}
	})
	t.Run("update Conflict", func(t *testing.T) {
		conflict := false
		e := newEnv(t, &interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if conflict {
				return apierrors.NewConflict(gr, obj.GetName(), nil)
			}
			return c.Update(ctx, obj, opts...)
		}}, newWHC(1))
		e.reconcile()
		whcRV := e.whc().ResourceVersion
		s := e.secret()
		s.Data[TLSCertKey] = []byte("garbage")
		e.update(s)

		conflict = true
		_, err := e.r.Reconcile(context.Background(), reconcile.Request{})
		if !apierrors.IsConflict(err) {
			t.Fatalf("Reconcile error = %v, want Conflict", err)
		}
		if e.whc().ResourceVersion != whcRV {
			t.Error("webhook configuration written although the secret update failed")
		}
	})
	t.Run("stale resourceVersion", func(t *testing.T) {
		// A second leader that read the Secret before the first one wrote it
		// must lose: the real fake client enforces resourceVersion.
		raced := true // armed only for the reconcile below
		e := newEnv(t, &interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if s, ok := obj.(*corev1.Secret); ok && !raced {
				raced = true
				other := &corev1.Secret{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(s), other); err != nil {
					return err
				}
				other.Annotations = map[string]string{"written-by": "other-leader"}
				if err := c.Update(ctx, other); err != nil {
					return err
				}
			}
			return c.Update(ctx, obj, opts...)
		}}, newWHC(1))
		e.reconcile()
		s := e.secret()
		s.Data[TLSCertKey] = []byte("garbage")
		if err := e.c.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		raced = false
		_, err := e.r.Reconcile(context.Background(), reconcile.Request{})
		if !apierrors.IsConflict(err) {
			t.Fatalf("Reconcile error = %v, want Conflict", err)
		}
	})
}

func TestInvalidOptions(t *testing.T) {
	for name, mutate := range map[string]func(*Options){
		"no secret":        func(o *Options) { o.SecretName = "" },
		"no webhook":       func(o *Options) { o.WebhookConfigName = "" },
		"no SANs":          func(o *Options) { o.DNSNames, o.IPAddresses = nil, nil },
		"negative CA life": func(o *Options) { o.CAValidity = -time.Hour },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil, newWHC(1))
			mutate(&e.r.Options)
			if _, err := e.r.Reconcile(context.Background(), reconcile.Request{}); err == nil {
				t.Error("Reconcile accepted invalid options")
			}
		})
	}
}

func TestRequeueAfterBounds(t *testing.T) {
	now := time.Unix(0, 0)
	for _, tc := range []struct {
		next time.Time
		want time.Duration
	}{
		{now.Add(-time.Hour), time.Second},
		{now, time.Second},
		{now.Add(10 * time.Minute), 10 * time.Minute},
		{now.Add(48 * time.Hour), time.Hour},
	} {
		if got := requeueAfter(tc.next, now); got != tc.want {
			t.Errorf("requeueAfter(%v) = %v, want %v", tc.next.Sub(now), got, tc.want)
		}
	}
}

func TestWatchPredicatesAndInitialEnqueue(t *testing.T) {
	p := isNamed(testNS, testSecret)
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	if !p.Create(event.CreateEvent{Object: secret(testNS, testSecret)}) {
		t.Error("predicate rejects the managed secret")
	}
	if p.Update(event.UpdateEvent{ObjectOld: secret(testNS, "other"), ObjectNew: secret(testNS, "other")}) {
		t.Error("predicate accepts another secret")
	}
	if p.Delete(event.DeleteEvent{Object: secret("other-ns", testSecret)}) {
		t.Error("predicate accepts a same-named secret in another namespace")
	}

	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: testSecret}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := enqueueOnce(req).Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 1 {
		t.Fatalf("initial source enqueued %d requests, want 1", q.Len())
	}
	if got, _ := q.Get(); got != req {
		t.Errorf("initial request = %v, want %v", got, req)
	}
}

// TestSetupWithManagerReconcilesAtStart runs the controller in a manager with
// fake informers that never deliver an event: the Secret must still be
// created, which only the initial enqueue can cause.
func TestSetupWithManagerReconcilesAtStart(t *testing.T) {
	created := make(chan struct{})
	var once sync.Once
	e := newEnv(t, &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		err := c.Create(ctx, obj, opts...)
		if _, ok := obj.(*corev1.Secret); ok && err == nil {
			once.Do(func() { close(created) })
		}
		return err
	}}, newWHC(1))

	informers := &informertest.FakeInformers{Scheme: clientgoscheme.Scheme, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{
		corev1.SchemeGroupVersion.WithKind("Secret"):                                        &controllertest.FakeInformer{Synced: true},
		admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"): &controllertest.FakeInformer{Synced: true},
	}}
	skip := true
	mgr, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, manager.Options{
		Scheme:                 clientgoscheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
		NewCache:               func(*rest.Config, cache.Options) (cache.Cache, error) { return informers, nil },
		NewClient:              func(*rest.Config, client.Options) (client.Client, error) { return e.c, nil },
	})
	if err != nil {
		t.Fatalf("manager.New: %v", err)
	}
	if err := e.r.SetupWithManager(mgr); err != nil {
		t.Fatalf("SetupWithManager: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	select {
	case <-created:
	case err := <-stopped:
		t.Fatalf("manager stopped before the first reconcile: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile at controller start without any watch event")
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Errorf("manager.Start: %v", err)
	}
	verify(t, leafOf(t, e.secret()), bundleOf(t, e.secret().Data[CACertKey]), e.clock.Now(), e.r.Options.DNSNames, e.r.Options.IPAddresses)

	e.r.Options.WebhookConfigName = ""
	if err := e.r.SetupWithManager(mgr); err == nil {
		t.Error("SetupWithManager accepted invalid options")
	}
}
