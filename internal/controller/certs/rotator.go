// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// ControllerName is the name of the controller registered by SetupWithManager.
const ControllerName = "webhook-certs"

const (
	// missingConfigRetry is how soon to look again for a webhook
	// configuration that has not been applied yet.
	missingConfigRetry = 10 * time.Second
	minRequeue         = time.Second
	// maxRequeue bounds how long a lost or missed watch event can leave
	// the Secret or caBundle wrong.
	maxRequeue = time.Hour
)

// Rotator is the leader-only part: a controller-runtime reconciler that keeps
// the Secret and the webhook configuration's caBundle current.
type Rotator struct {
	Client  client.Client
	Options Options
}

// Reconcile brings the Secret and the caBundle up to date. The request is
// ignored: there is a single Secret and a single webhook configuration.
func (r *Rotator) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	o, err := r.Options.withDefaults()
	if err != nil {
		// Retrying cannot fix a configuration error.
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("invalid webhook certificate options: %w", err))
	}
	logger := log.FromContext(ctx).WithValues("secret", o.SecretNamespace+"/"+o.SecretName, "webhookConfiguration", o.WebhookConfigName)
	now := o.Now()

	secretKey := types.NamespacedName{Namespace: o.SecretNamespace, Name: o.SecretName}
	secret := &corev1.Secret{}
	secretExists := true
	if err := r.Client.Get(ctx, secretKey, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("getting secret %s: %w", secretKey, err)
		}
		secretExists = false
	}

	// Read before writing anything: whether the API server already trusts the
	// newest CA must be judged from a caBundle injected by an earlier
	// reconcile, not by this one.
	whc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: o.WebhookConfigName}, whc); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("getting mutating webhook configuration %s: %w", o.WebhookConfigName, err)
		}
		whc = nil
	}

	var current map[string][]byte
	if secretExists {
		current = secret.Data
	}
	p, err := planSecret(current, caTrustedBy(whc), o, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if p.deferred != "" {
		logger.Info("keeping the current serving certificate until the webhook configuration trusts the new CA", "reason", p.deferred)
	}

	switch {
	case !secretExists:
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.SecretNamespace, Name: o.SecretName},
			Type:       corev1.SecretTypeTLS,
			Data:       p.data,
		}
		// AlreadyExists means another leader won the race; the error makes
		// controller-runtime retry against what it wrote.
		if err := r.Client.Create(ctx, secret); err != nil {
			return reconcile.Result{}, fmt.Errorf("creating secret %s: %w", secretKey, err)
		}
		logger.Info("created webhook certificate secret", "caNotAfter", p.ca.NotAfter, "certNotAfter", p.leaf.NotAfter)
	case p.changed(secret.Data):
		data := maps.Clone(secret.Data)
		if data == nil {
			data = map[string][]byte{}
		}
		maps.Copy(data, p.data)
		secret.Data = data
		// secret carries the resourceVersion we read, so a concurrent
		// writer makes this fail with Conflict instead of being overwritten.
		if err := r.Client.Update(ctx, secret); err != nil {
			return reconcile.Result{}, fmt.Errorf("updating secret %s: %w", secretKey, err)
		}
		logger.Info("updated webhook certificate secret", "reasons", p.reasons, "caNotAfter", p.ca.NotAfter, "certNotAfter", p.leaf.NotAfter)
	}

	result := reconcile.Result{RequeueAfter: requeueAfter(p.next, now)}
	if whc == nil {
		logger.Info("mutating webhook configuration not found; will inject the CA bundle once it exists")
		result.RequeueAfter = min(result.RequeueAfter, missingConfigRetry)
		return result, nil
	}
	if err := r.inject(ctx, whc, p.data[CACertKey]); err != nil {
		return reconcile.Result{}, err
	}
	return result, nil
}

// inject sets caBundle on every webhook, writing only when something differs
// so steady-state reconciles do not generate watch events.
func (r *Rotator) inject(ctx context.Context, whc *admissionregistrationv1.MutatingWebhookConfiguration, caPEM []byte) error {
	changed := false
	for i := range whc.Webhooks {
		if !bytes.Equal(whc.Webhooks[i].ClientConfig.CABundle, caPEM) {
			whc.Webhooks[i].ClientConfig.CABundle = slices.Clone(caPEM)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	// Update (not an unconditional patch) so the resourceVersion we read is a
	// precondition and a concurrent change is retried rather than clobbered.
	if err := r.Client.Update(ctx, whc); err != nil {
		return fmt.Errorf("injecting CA bundle into mutating webhook configuration %s: %w", whc.Name, err)
	}
	log.FromContext(ctx).Info("injected CA bundle", "webhookConfiguration", whc.Name, "webhooks", len(whc.Webhooks))
	return nil
}

// caTrustedBy reports whether every webhook of whc already trusts ca. With no
// configuration nobody can be relying on the old CA, so there is nothing to
// wait for.
func caTrustedBy(whc *admissionregistrationv1.MutatingWebhookConfiguration) func(*x509.Certificate) bool {
	return func(ca *x509.Certificate) bool {
		if whc == nil {
			return true
		}
		for _, wh := range whc.Webhooks {
			if !containsCert(parseCerts(wh.ClientConfig.CABundle), ca) {
				return false
			}
		}
		return true
	}
}

func containsCert(certs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(certs, c.Equal)
}

func requeueAfter(next, now time.Time) time.Duration {
	return min(max(next.Sub(now), minRequeue), maxRequeue)
}

// plan is the desired content of the Secret's four keys.
type plan struct {
	data     map[string][]byte
	ca       *x509.Certificate // newest CA, first in data[CACertKey]
	leaf     *x509.Certificate // serving certificate in data[TLSCertKey]
	reasons  []string          // why the Secret changes, for logs
	deferred string            // why the serving cert should be replaced but is not yet
	next     time.Time         // when the Secret needs another look
}

func (p *plan) changed(current map[string][]byte) bool {
	for k, v := range p.data {
		if !bytes.Equal(current[k], v) {
			return true
		}
	}
	return false
}

// planSecret decides the Secret's content from its current data (nil when it
// does not exist). trusted reports whether consumers already trust a CA; it
// gates replacing a still-usable serving certificate with one from a CA the
// API server may not know yet.
func planSecret(current map[string][]byte, trusted func(*x509.Certificate) bool, o Options, now time.Time) (*plan, error) {
	p := &plan{data: map[string][]byte{}}
	oldCAs := parseCerts(current[CACertKey])

	ca, reason := currentCA(oldCAs, current[CAKeyKey], now)
	if ca == nil {
		fresh, err := newCA(now, o.CAValidity)
		if err != nil {
			return nil, err
		}
		ca = fresh
		if current != nil {
			p.reasons = append(p.reasons, "new CA: "+reason)
		}
	} else {
		oldCAs = oldCAs[1:]
	}
	p.ca = ca.cert
	p.next = rotationPoint(ca.cert)

	// Previous CAs stay in the bundle until they expire so certificates they
	// signed keep verifying while the serving certificate moves to the new CA.
	bundle := []*x509.Certificate{ca.cert}
	for _, c := range oldCAs {
		if !c.IsCA || now.After(c.NotAfter) || containsCert(bundle, c) {
			continue
		}
		bundle = append(bundle, c)
		if c.NotAfter.Before(p.next) {
			p.next = c.NotAfter // to drop it from the bundle once expired
		}
	}
	p.data[CACertKey] = encodeCerts(bundle)
	p.data[CAKeyKey] = ca.keyPEM

	leaf, broken, stale := checkServing(current[TLSCertKey], current[TLSKeyKey], bundle, o, now)
	switch {
	case broken != "" || (stale != "" && trusted(ca.cert)):
		serving, err := newServingCert(ca, o.DNSNames, o.IPAddresses, now, o.CertValidity)
		if err != nil {
			return nil, err
		}
		if current != nil {
			p.reasons = append(p.reasons, "new serving certificate: "+broken+stale)
		}
		p.data[TLSCertKey] = serving.certPEM
		p.data[TLSKeyKey] = serving.keyPEM
		p.leaf = serving.cert
		p.next = earliest(p.next, rotationPoint(serving.cert))
	case stale != "":
		// The current certificate still works; replacing it now could hand
		// the API server a certificate from a CA it does not trust yet.
		p.deferred = stale
		p.data[TLSCertKey] = current[TLSCertKey]
		p.data[TLSKeyKey] = current[TLSKeyKey]
		p.leaf = leaf
		p.next = now
	default:
		p.data[TLSCertKey] = current[TLSCertKey]
		p.data[TLSKeyKey] = current[TLSKeyKey]
		p.leaf = leaf
		p.next = earliest(p.next, rotationPoint(leaf))
	}
	return p, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// currentCA returns the CA to keep signing with (the first certificate of the
// bundle with ca.key), or nil and why a new CA is needed.
func currentCA(bundle []*x509.Certificate, keyPEM []byte, now time.Time) (*keyPair, string) {
	if len(bundle) == 0 {
		return nil, "CA certificate missing or unparsable"
	}
	c := bundle[0]
	key, err := parsePrivateKey(keyPEM)
	switch {
	case err != nil:
		return nil, "CA key missing or unparsable"
	case !keyMatches(c, key):
		return nil, "CA key does not match the CA certificate"
	case !c.IsCA || !c.BasicConstraintsValid:
		return nil, "CA certificate is not a CA"
	case !validAt(c, now):
		return nil, "CA certificate expired or not yet valid"
	case needsRotation(c, now):
		return nil, "CA within its rotation window"
	}
	return &keyPair{cert: c, key: key, keyPEM: keyPEM}, ""
}

// checkServing classifies the serving certificate: broken means it must be
// replaced at once; stale means it still works but should be replaced.
func checkServing(certPEM, keyPEM []byte, bundle []*x509.Certificate, o Options, now time.Time) (leaf *x509.Certificate, broken, stale string) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "serving certificate or key missing, unparsable or mismatched", ""
	}
	leaf = pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, "serving certificate unparsable", ""
		}
	}
	if !validAt(leaf, now) {
		return leaf, "serving certificate expired or not yet valid", ""
	}
	signer := slices.IndexFunc(bundle, func(ca *x509.Certificate) bool { return signedBy(leaf, ca, now) })
	switch {
	case signer < 0:
		return leaf, "serving certificate not signed by a CA in the bundle", ""
	case missingSAN(leaf, o.DNSNames, o.IPAddresses) != "":
		return leaf, "", "serving certificate lacks SAN " + missingSAN(leaf, o.DNSNames, o.IPAddresses)
	case needsRotation(leaf, now):
		return leaf, "", "serving certificate within its rotation window"
	case signer > 0:
		return leaf, "", "serving certificate signed by a previous CA"
	}
	return leaf, "", ""
}

// SetupWithManager registers the leader-elected "webhook-certs" controller.
func (r *Rotator) SetupWithManager(mgr manager.Manager) error {
	o, err := r.Options.withDefaults()
	if err != nil {
		return fmt.Errorf("invalid webhook certificate options: %w", err)
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.SecretNamespace, Name: o.SecretName}}
	toReq := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{req}
	})
	err = builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(retry.Options()).
		Watches(&corev1.Secret{}, toReq, builder.WithPredicates(isNamed(o.SecretNamespace, o.SecretName))).
		Watches(&admissionregistrationv1.MutatingWebhookConfiguration{}, toReq, builder.WithPredicates(isNamed("", o.WebhookConfigName))).
		// A watch on an object that does not exist yet never fires, so
		// enqueue once when the controller starts (i.e. on becoming leader).
		WatchesRawSource(enqueueOnce(req)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up %s controller: %w", ControllerName, err)
	}
	return nil
}

func isNamed(namespace, name string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetNamespace() == namespace && obj.GetName() == name
	})
}

func enqueueOnce(req reconcile.Request) source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(req)
		return nil
	})
}
