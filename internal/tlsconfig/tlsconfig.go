// SPDX-License-Identifier: Apache-2.0

// Package tlsconfig holds the TLS settings of every TLS server ipkeeper's
// daemons run (the controller's webhook, and /metrics of either daemon when
// given a certificate directory): the --tls-min-version,
// --tls-cipher-suites, --tls-curve-preferences and --enable-http2 flags both
// binaries take, their parsing and validation, the tls.Config they give, and
// the reloading certificate source of a certificate directory.
//
// The flags take what CNAO and HCO pass their components from the
// cluster's TLS profile: versions by k8s.io/component-base's names
// (VersionTLS12, VersionTLS13; ipkeeper's earlier 1.2 and 1.3 still work),
// cipher suites by their IANA names as component-base maps them.
//
// The defaults are what the servers did before the flags existed, but
// HTTP/2: TLS 1.3 and above, Go's cipher suites and curves, and HTTP/1.1
// only (ALPN "http/1.1"; HTTP/2 only with --enable-http2).
package tlsconfig

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	cliflag "k8s.io/component-base/cli/flag"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// The flags, as both daemons name them (the Helm chart passes them from
// tls.minVersion, tls.cipherSuites, tls.curvePreferences and
// tls.enableHTTP2).
const (
	FlagMinVersion       = "tls-min-version"
	FlagCipherSuites     = "tls-cipher-suites"
	FlagCurvePreferences = "tls-curve-preferences"
	FlagEnableHTTP2      = "enable-http2"
)

// DefaultMinVersion is --tls-min-version's default.
const DefaultMinVersion = "VersionTLS13"

// Files of a certificate directory, as kubernetes.io/tls Secrets name them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// Options are the command-line TLS settings, unparsed. AddFlags sets the
// defaults; Parse checks and converts them.
type Options struct {
	// MinVersion is --tls-min-version: VersionTLS12 or VersionTLS13 (or
	// 1.2 or 1.3).
	MinVersion string
	// CipherSuites is --tls-cipher-suites: comma-separated IANA names, as
	// crypto/tls's CipherSuites() names them; empty: Go's defaults. They
	// matter only for TLS 1.2: Go does not let TLS 1.3's be chosen.
	CipherSuites string
	// CurvePreferences is --tls-curve-preferences: comma-separated curve
	// names (CurveNames); empty: Go's defaults.
	CurvePreferences string
	// EnableHTTP2 is --enable-http2: offer HTTP/2 by ALPN.
	EnableHTTP2 bool
}

// AddFlags registers --tls-min-version, --tls-cipher-suites,
// --tls-curve-preferences and --enable-http2 with their defaults. what says
// which servers they apply to, for the help text.
func (o *Options) AddFlags(fs *flag.FlagSet, what string) {
	fs.StringVar(&o.MinVersion, FlagMinVersion, DefaultMinVersion,
		"minimum TLS version of "+what+": VersionTLS12 or VersionTLS13 (k8s.io/component-base's names, as CNAO and HCO pass them), or 1.2 or 1.3")
	fs.StringVar(&o.CipherSuites, FlagCipherSuites, "",
		"comma-separated TLS 1.2 cipher suites of "+what+" (IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); "+
			"insecure ones are refused; only meaningful with --"+FlagMinVersion+" VersionTLS12 (Go chooses TLS 1.3's itself); empty: Go's defaults")
	fs.StringVar(&o.CurvePreferences, FlagCurvePreferences, "",
		"comma-separated key exchange curves accepted by "+what+": "+strings.Join(CurveNames(), ", ")+"; a client offering none of them is refused; empty: Go's defaults")
	fs.BoolVar(&o.EnableHTTP2, FlagEnableHTTP2, false,
		"offer HTTP/2 (ALPN h2) on "+what+"; off: HTTP/1.1 only (HTTP/2's rapid reset and stream floods, CVE-2023-44487); "+
			"the health probes and profiles are plain HTTP/1.1 either way")
}

// Server is a parsed Options: what a TLS server applies. The zero Server
// is the defaults: TLS 1.3, Go's cipher suites.
type Server struct {
	MinVersion uint16
	// CipherSuites are the TLS 1.2 suites allowed; nil: Go's defaults.
	CipherSuites []uint16
	// CurvePreferences are the key exchange curves allowed; nil: Go's
	// defaults.
	CurvePreferences []tls.CurveID
	// EnableHTTP2 offers h2 by ALPN; false: only http/1.1.
	EnableHTTP2 bool
}

// Parse checks the options; errors name the flag and the value.
func (o Options) Parse() (Server, error) {
	var s Server
	var err error
	if s.MinVersion, err = ParseVersion(FlagMinVersion, o.MinVersion); err != nil {
		return Server{}, err
	}
	if s.CipherSuites, err = ParseCipherSuites(FlagCipherSuites, o.CipherSuites); err != nil {
		return Server{}, err
	}
	if s.CurvePreferences, err = ParseCurves(FlagCurvePreferences, o.CurvePreferences); err != nil {
		return Server{}, err
	}
	s.EnableHTTP2 = o.EnableHTTP2
	if s.MinVersion == tls.VersionTLS12 && s.CipherSuites != nil && len(s.CipherSuites) == 0 {
		return Server{}, fmt.Errorf("invalid --%s %q: no TLS 1.2 suite, so no TLS 1.2 client could connect (TLS 1.3's are not configurable); list TLS 1.2 suites, or set --%s VersionTLS13",
			FlagCipherSuites, o.CipherSuites, FlagMinVersion)
	}
	return s, nil
}

// ParseVersion maps a minimum-version flag value to a crypto/tls version:
// k8s.io/component-base's names (VersionTLS12, VersionTLS13: what CNAO and
// HCO pass), or ipkeeper's earlier 1.2 and 1.3. TLS 1.0 and 1.1 are
// refused: they are deprecated (RFC 8996), and neither the API server nor
// Prometheus needs them.
func ParseVersion(flagName, s string) (uint16, error) {
	name := s
	if long, ok := shortVersions[s]; ok {
		name = long
	}
	// component-base gives its default (TLS 1.2) for "": refused here, as
	// an empty value is a mistake in a manifest.
	v, err := cliflag.TLSVersion(name)
	if s == "" || err != nil || v < tls.VersionTLS12 {
		return 0, fmt.Errorf("invalid --%s %q: must be VersionTLS12 or VersionTLS13 (or 1.2 or 1.3)", flagName, s)
	}
	return v, nil
}

// shortVersions maps the version names ipkeeper took before
// component-base's to component-base's.
var shortVersions = map[string]string{"1.2": "VersionTLS12", "1.3": "VersionTLS13"}

// ParseCipherSuites parses a comma-separated list of IANA cipher suite
// names (as k8s.io/component-base maps them: crypto/tls's names and the
// two legacy CHACHA20_POLY1305 spellings) into the IDs of its TLS 1.2
// suites. Names of TLS 1.3 suites are accepted and left out: Go always
// enables all of them. Insecure and unknown names are errors. An empty list
// gives nil (Go's defaults); a list of TLS 1.3 suites only gives an empty,
// non-nil slice.
func ParseCipherSuites(flagName, s string) ([]uint16, error) {
	names, err := splitList(flagName, s)
	if names == nil || err != nil {
		return nil, err
	}
	insecure := cliflag.InsecureTLSCiphers()
	ids := []uint16{}
	for _, name := range names {
		if _, bad := insecure[name]; bad {
			return nil, fmt.Errorf("invalid --%s: %q is insecure (crypto/tls lists it among InsecureCipherSuites)", flagName, name)
		}
		id, err := cliflag.TLSCipherSuites([]string{name})
		if err != nil {
			return nil, fmt.Errorf("invalid --%s: unknown cipher suite %q (want IANA names as Go's crypto/tls knows them: %s)",
				flagName, name, strings.Join(SecureTLS12Names(), ", "))
		}
		c := findID(tls.CipherSuites(), id[0])
		if c != nil && slices.Contains(c.SupportedVersions, tls.VersionTLS12) && !slices.Contains(ids, c.ID) {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// curves are the names --tls-curve-preferences takes: crypto/tls's
// constant names, as CNAO and HCO pass them (CurveP256; ipam-extensions
// takes only these), the names of RFC 8446 and of OpenShift's TLS
// profiles' groups (secp256r1), and NIST's (P-256).
var curves = map[string]tls.CurveID{
	"X25519":         tls.X25519,
	"X25519MLKEM768": tls.X25519MLKEM768, // hybrid post-quantum, TLS 1.3 only
	"CurveP256":      tls.CurveP256,
	"CurveP384":      tls.CurveP384,
	"CurveP521":      tls.CurveP521,
	"secp256r1":      tls.CurveP256,
	"secp384r1":      tls.CurveP384,
	"secp521r1":      tls.CurveP521,
	"P-256":          tls.CurveP256,
	"P-384":          tls.CurveP384,
	"P-521":          tls.CurveP521,
}

// CurveNames are the names --tls-curve-preferences takes, sorted.
func CurveNames() []string {
	names := make([]string, 0, len(curves))
	for name := range curves {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// ParseCurves parses a comma-separated list of curve names (CurveNames)
// into crypto/tls's IDs, in the order given, each once. Unknown names are
// errors naming the flag and the value; an empty list gives nil (Go's
// defaults).
func ParseCurves(flagName, s string) ([]tls.CurveID, error) {
	names, err := splitList(flagName, s)
	if names == nil || err != nil {
		return nil, err
	}
	ids := []tls.CurveID{}
	for _, name := range names {
		id, ok := curves[name]
		if !ok {
			return nil, fmt.Errorf("invalid --%s: unknown curve %q (want %s)", flagName, name, strings.Join(CurveNames(), ", "))
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// splitList splits a comma-separated flag value, trimming spaces: nil for
// a blank value, an error naming the flag for an empty element.
func splitList(flagName, s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	names := strings.Split(s, ",")
	for i, name := range names {
		if names[i] = strings.TrimSpace(name); names[i] == "" {
			return nil, fmt.Errorf("invalid --%s %q: empty name in the list", flagName, s)
		}
	}
	return names, nil
}

// SecureTLS12Names are the names --tls-cipher-suites accepts that have an
// effect: the TLS 1.2 suites crypto/tls does not call insecure.
func SecureTLS12Names() []string {
	var names []string
	for _, c := range tls.CipherSuites() {
		if slices.Contains(c.SupportedVersions, tls.VersionTLS12) {
			names = append(names, c.Name)
		}
	}
	return names
}

func findID(suites []*tls.CipherSuite, id uint16) *tls.CipherSuite {
	for _, c := range suites {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// Apply sets the minimum version, the cipher suites, the curves and the
// ALPN protocols on c; its signature is that of controller-runtime's
// TLSOpts entries. NextProtos is always set: controller-runtime's webhook
// and metrics servers start from ["h2"], which Apply replaces with
// ["http/1.1"] unless EnableHTTP2.
func (s Server) Apply(c *tls.Config) {
	c.MinVersion = s.MinVersion
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS13
	}
	if s.CipherSuites != nil {
		c.CipherSuites = slices.Clone(s.CipherSuites)
	}
	if s.CurvePreferences != nil {
		c.CurvePreferences = slices.Clone(s.CurvePreferences)
	}
	c.NextProtos = []string{"http/1.1"}
	if s.EnableHTTP2 {
		c.NextProtos = []string{"h2", "http/1.1"}
	}
}

// Config is a server tls.Config with s applied and the certificate from
// getCert.
func (s Server) Config(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: getCert}
	s.Apply(c)
	return c
}

// WatchCertDir loads tls.crt and tls.key from dir and returns a watcher
// that serves them (GetCertificate) and, once its Start runs, reloads them
// when they change (as a mounted Secret does). flagName names the flag
// that gave dir, for the error.
func WatchCertDir(flagName, dir string) (*certwatcher.CertWatcher, error) {
	if dir == "" {
		return nil, errors.New("no certificate directory")
	}
	w, err := certwatcher.New(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("--%s %s: loading %s and %s: %w", flagName, dir, CertFile, KeyFile, err)
	}
	return w, nil
}
