// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretReadTimeout bounds a handshake's wait for the Secret; with a cache
// reader it only matters before the cache has synced.
const secretReadTimeout = 5 * time.Second

// Server is the every-replica part: it serves the certificate from the Secret.
// Use it through a pointer; it caches the parsed certificate.
type Server struct {
	Reader          client.Reader
	Namespace, Name string

	mu sync.Mutex
	// rv is the Secret resourceVersion that cert/err were derived from.
	rv string
	// cert is the last successfully parsed certificate.
	cert *tls.Certificate
	// err is the parse error for rv, if any.
	err error
	// parses counts parse attempts, so tests can check the cache works.
	parses int
}

// GetCertificate is suitable for tls.Config.GetCertificate. It reads the
// Secret through Reader (the manager's cache) on each handshake, but parses
// tls.crt/tls.key only when the Secret's resourceVersion changed.
func (s *Server) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), secretReadTimeout)
	defer cancel()
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	secret := &corev1.Secret{}
	if err := s.Reader.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading webhook certificate secret %s: %w", key, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rv != secret.ResourceVersion || (s.cert == nil && s.err == nil) {
		s.rv = secret.ResourceVersion
		s.parses++
		cert, err := parseServing(secret.Data[TLSCertKey], secret.Data[TLSKeyKey])
		if err != nil {
			s.err = fmt.Errorf("webhook certificate secret %s: %w", key, err)
		} else {
			s.cert, s.err = cert, nil
		}
	}
	if s.err != nil {
		if s.cert != nil {
			// The leader repairs a damaged Secret; until then the last good
			// certificate is still signed by a trusted CA, so keep serving it.
			return s.cert, nil
		}
		return nil, s.err
	}
	return s.cert, nil
}

// Ready is a healthz.Checker (func(*http.Request) error): nil once a valid
// certificate can be served.
func (s *Server) Ready(_ *http.Request) error {
	if _, err := s.GetCertificate(nil); err != nil {
		return fmt.Errorf("no webhook serving certificate: %w", err)
	}
	return nil
}

func parseServing(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, errors.New("tls.crt or tls.key is empty")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The error from crypto/tls never contains key bytes.
		return nil, fmt.Errorf("parsing tls.crt/tls.key: %w", err)
	}
	if cert.Leaf == nil {
		// Parsed once here instead of by crypto/tls on every handshake.
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parsing tls.crt: %w", err)
		}
	}
	return &cert, nil
}
