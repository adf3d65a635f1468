// SPDX-License-Identifier: Apache-2.0

// Package tlsconfig holds the TLS settings of every TLS server ipkeeper's
// daemons run (the controller's webhook, and /metrics of either daemon when
// given a certificate directory): the --tls-min-version and
// --tls-cipher-suites flags both binaries take, their parsing and
// validation, the tls.Config they give, and the reloading certificate source
// of a certificate directory.
//
// The defaults are what the servers did before the flags existed: TLS 1.3
// and above, with Go's cipher suites.
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

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// The flags, as both daemons name them (the Helm chart passes them from
// tls.minVersion and tls.cipherSuites).
const (
	FlagMinVersion   = "tls-min-version"
	FlagCipherSuites = "tls-cipher-suites"
)

// DefaultMinVersion is --tls-min-version's default.
const DefaultMinVersion = "1.3"

// Files of a certificate directory, as kubernetes.io/tls Secrets name them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// Options are the command-line TLS settings, unparsed. AddFlags sets the
// defaults; Parse checks and converts them.
type Options struct {
	// MinVersion is --tls-min-version: "1.2" or "1.3".
	MinVersion string
	// CipherSuites is --tls-cipher-suites: comma-separated IANA names, as
	// crypto/tls's CipherSuites() names them; empty: Go's defaults. They
	// matter only for TLS 1.2: Go does not let TLS 1.3's be chosen.
	CipherSuites string

	// given holds the value of every flag that sets MinVersion (the flag
	// and its deprecated aliases) given on the command line, so that Parse
	// can refuse two that disagree.
	given map[string]string
}

// AddFlags registers --tls-min-version and --tls-cipher-suites with their
// defaults. what says which servers they apply to, for the help text.
func (o *Options) AddFlags(fs *flag.FlagSet, what string) {
	o.MinVersion = DefaultMinVersion
	fs.Var(&minVersionValue{o: o, name: FlagMinVersion}, FlagMinVersion,
		"minimum TLS version of "+what+": 1.2 or 1.3")
	fs.StringVar(&o.CipherSuites, FlagCipherSuites, "",
		"comma-separated TLS 1.2 cipher suites of "+what+" (IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); "+
			"insecure ones are refused; only meaningful with --"+FlagMinVersion+" 1.2 (Go chooses TLS 1.3's itself); empty: Go's defaults")
}

// AddDeprecatedMinVersionFlag registers name as a deprecated alias of
// --tls-min-version: it sets the same value, says so on stderr when used,
// and Parse refuses it when --tls-min-version is also given with another
// value.
func (o *Options) AddDeprecatedMinVersionFlag(fs *flag.FlagSet, name string) {
	fs.Var(&minVersionValue{o: o, name: name, deprecated: fs}, name,
		"deprecated: use --"+FlagMinVersion)
}

// minVersionValue is the flag.Value of --tls-min-version and its aliases.
type minVersionValue struct {
	o    *Options
	name string
	// deprecated, for an alias, is its flag set (where the notice goes).
	deprecated *flag.FlagSet
}

func (v *minVersionValue) String() string {
	if v == nil || v.o == nil {
		return ""
	}
	return v.o.MinVersion
}

func (v *minVersionValue) Set(s string) error {
	if v.deprecated != nil {
		fmt.Fprintf(v.deprecated.Output(), "Flag --%s has been deprecated, use --%s instead\n", v.name, FlagMinVersion)
	}
	if v.o.given == nil {
		v.o.given = map[string]string{}
	}
	v.o.given[v.name] = s
	v.o.MinVersion = s
	return nil
}

// Server is a parsed Options: what a TLS server applies. The zero Server
// is the defaults: TLS 1.3, Go's cipher suites.
type Server struct {
	MinVersion uint16
	// CipherSuites are the TLS 1.2 suites allowed; nil: Go's defaults.
	CipherSuites []uint16
}

// Parse checks the options; errors name the flag and the value.
func (o Options) Parse() (Server, error) {
	// Every flag given must parse, and all must agree; the error names
	// the flag the value came from.
	names := make([]string, 0, len(o.given))
	for name := range o.given {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := ParseVersion(name, o.given[name]); err != nil {
			return Server{}, err
		}
	}
	if v, ok := o.given[FlagMinVersion]; ok {
		for _, name := range names {
			if name != FlagMinVersion && o.given[name] != v {
				return Server{}, fmt.Errorf("--%s %q (deprecated) and --%s %q differ: give only --%s",
					name, o.given[name], FlagMinVersion, v, FlagMinVersion)
			}
		}
	}
	var s Server
	var err error
	if s.MinVersion, err = ParseVersion(FlagMinVersion, o.MinVersion); err != nil {
		return Server{}, err
	}
	if s.CipherSuites, err = ParseCipherSuites(FlagCipherSuites, o.CipherSuites); err != nil {
		return Server{}, err
	}
	if s.MinVersion == tls.VersionTLS12 && s.CipherSuites != nil && len(s.CipherSuites) == 0 {
		return Server{}, fmt.Errorf("invalid --%s %q: no TLS 1.2 suite, so no TLS 1.2 client could connect (TLS 1.3's are not configurable); list TLS 1.2 suites, or set --%s 1.3",
			FlagCipherSuites, o.CipherSuites, FlagMinVersion)
	}
	return s, nil
}

// ParseVersion maps a minimum-version flag value to a crypto/tls version.
// TLS 1.0 and 1.1 are refused: they are deprecated (RFC 8996), and neither
// the API server nor Prometheus needs them.
func ParseVersion(flagName, s string) (uint16, error) {
	switch s {
	case "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("invalid --%s %q: must be 1.2 or 1.3", flagName, s)
}

// ParseCipherSuites parses a comma-separated list of IANA cipher suite
// names into the IDs of its TLS 1.2 suites. Names of TLS 1.3 suites are
// accepted and left out: Go always enables all of them. Insecure and
// unknown names are errors. An empty list gives nil (Go's defaults); a list
// of TLS 1.3 suites only gives an empty, non-nil slice.
func ParseCipherSuites(flagName, s string) ([]uint16, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	ids := []uint16{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("invalid --%s %q: empty name in the list", flagName, s)
		}
		if c := find(tls.InsecureCipherSuites(), name); c != nil {
			return nil, fmt.Errorf("invalid --%s: %q is insecure (crypto/tls lists it among InsecureCipherSuites)", flagName, name)
		}
		c := find(tls.CipherSuites(), name)
		if c == nil {
			return nil, fmt.Errorf("invalid --%s: unknown cipher suite %q (want IANA names as Go's crypto/tls knows them: %s)",
				flagName, name, strings.Join(SecureTLS12Names(), ", "))
		}
		if slices.Contains(c.SupportedVersions, tls.VersionTLS12) && !slices.Contains(ids, c.ID) {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
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

func find(suites []*tls.CipherSuite, name string) *tls.CipherSuite {
	for _, c := range suites {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Apply sets the minimum version and the cipher suites on c; its signature
// is that of controller-runtime's TLSOpts entries.
func (s Server) Apply(c *tls.Config) {
	c.MinVersion = s.MinVersion
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS13
	}
	if s.CipherSuites != nil {
		c.CipherSuites = slices.Clone(s.CipherSuites)
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
