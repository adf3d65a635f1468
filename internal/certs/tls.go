// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"crypto/tls"
	"fmt"
)

// TLSVersion maps the --webhook-tls-min-version flag value to a crypto/tls
// version. TLS 1.0 and 1.1 are rejected: they are deprecated (RFC 8996) and
// the API server never needs them.
func TLSVersion(s string) (uint16, error) {
	switch s {
	case "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("invalid --webhook-tls-min-version %q: must be 1.2 or 1.3", s)
}

// TLSOptions returns a webhook.Options.TLSOpts entry that sets the minimum
// TLS version and, when getCert is not nil, the certificate source.
// controller-runtime only falls back to its file-based cert watcher when
// GetCertificate is unset, so passing getCert replaces it.
func TLSOptions(minVersion uint16, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func(*tls.Config) {
	return func(c *tls.Config) {
		c.MinVersion = minVersion
		if getCert != nil {
			c.GetCertificate = getCert
		}
	}
}
