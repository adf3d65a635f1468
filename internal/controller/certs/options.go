// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"errors"
	"net"
	"time"
)

// Keys of the Secret. They follow the kubernetes.io/tls convention (tls.crt,
// tls.key) plus ca.crt/ca.key so a restarted leader can keep signing with the
// same CA instead of forcing a CA rotation.
const (
	CACertKey  = "ca.crt"
	CAKeyKey   = "ca.key"
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
)

const (
	// DefaultCAValidity is used when Options.CAValidity is zero.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultCertValidity is used when Options.CertValidity is zero.
	DefaultCertValidity = 365 * 24 * time.Hour

	// defaultCommonName is the serving certificate's CN when no DNS name is
	// configured; clients verify SANs, the CN is only informative.
	defaultCommonName = "ipkeeper-webhook"
)

// Options configure self-managed certificates.
type Options struct {
	SecretNamespace   string // Secret holding ca.crt, ca.key, tls.crt, tls.key
	SecretName        string
	WebhookConfigName string        // MutatingWebhookConfiguration whose every webhook gets caBundle
	DNSNames          []string      // SANs of the serving cert, e.g. svc, svc.ns, svc.ns.svc
	IPAddresses       []net.IP      // extra IP SANs (tests use 127.0.0.1)
	CAValidity        time.Duration // default 10 years (87600h) when zero
	CertValidity      time.Duration // default 1 year when zero
	// Rotation happens when less than 1/3 of a certificate's lifetime remains.
	Now func() time.Time // default time.Now; tests inject a clock
}

// withDefaults returns a validated copy with defaults filled in, so callers
// may keep passing the zero values documented above.
func (o Options) withDefaults() (Options, error) {
	if o.SecretNamespace == "" || o.SecretName == "" {
		return o, errors.New("secret namespace and name are required")
	}
	if o.WebhookConfigName == "" {
		return o, errors.New("webhook configuration name is required")
	}
	if len(o.DNSNames) == 0 && len(o.IPAddresses) == 0 {
		// A certificate without SANs cannot be verified by any client.
		return o, errors.New("at least one DNS name or IP address is required")
	}
	if o.CAValidity < 0 || o.CertValidity < 0 {
		return o, errors.New("validity durations must not be negative")
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}
