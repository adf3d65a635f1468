// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"crypto/tls"

	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

// TLSOptions returns a webhook.Options.TLSOpts entry that applies the
// server's TLS settings (--tls-min-version, --tls-cipher-suites,
// --tls-curve-preferences, and HTTP/1.1 only unless --enable-http2) and, when
// getCert is not nil, the certificate source. controller-runtime only
// falls back to its file-based cert watcher when GetCertificate is unset,
// so passing getCert replaces it.
func TLSOptions(settings tlsconfig.Server, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func(*tls.Config) {
	return func(c *tls.Config) {
		settings.Apply(c)
		if getCert != nil {
			c.GetCertificate = getCert
		}
	}
}
