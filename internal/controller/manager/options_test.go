// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"crypto/tls"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func defaults(t *testing.T) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"defaults are valid", func(*Options) {}, ""},
		{"tls 1.1", func(o *Options) { o.TLS.MinVersion = "1.1" }, `--tls-min-version "1.1"`},
		{"insecure suite", func(o *Options) { o.TLS.CipherSuites = "TLS_RSA_WITH_RC4_128_SHA" }, `--tls-cipher-suites: "TLS_RSA_WITH_RC4_128_SHA" is insecure`},
		{"cert mode", func(o *Options) { o.CertMode = "manual" }, `--webhook-cert-mode "manual"`},
		{"provided without dir", func(o *Options) { o.CertMode = CertsProvided; o.CertDir = "" }, "--webhook-cert-dir"},
		{"port", func(o *Options) { o.WebhookPort = 70000 }, "--webhook-port 70000"},
		{"grace", func(o *Options) { o.GCGracePeriod = -time.Second }, "--gc-grace-period -1s"},
		{"namespace", func(o *Options) { o.Namespace = "" }, "--namespace"},
		{"validity", func(o *Options) { o.CAValidity = time.Hour }, "--webhook-ca-validity 1h0m0s"},
		{"webhook off skips webhook checks", func(o *Options) { o.EnableWebhook = false; o.WebhookPort = 0 }, ""},
		{"TLS checked without the webhook (metrics)", func(o *Options) { o.EnableWebhook = false; o.TLS.MinVersion = "x" }, `--tls-min-version "x"`},
	}
	for _, tt := range tests {
		o := defaults(t)
		tt.change(&o)
		err := o.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestSANs(t *testing.T) {
	o := defaults(t)
	o.Namespace, o.ServiceName, o.ExtraSANs = "ipk", "hook", " 127.0.0.1, hook.example.org ,"
	dns, ips := o.sans()
	if strings.Join(dns, ",") != "hook.ipk.svc,hook.ipk.svc.cluster.local,hook.ipk,hook.example.org" {
		t.Errorf("dns = %v", dns)
	}
	if len(ips) != 1 || ips[0].String() != "127.0.0.1" {
		t.Errorf("ips = %v", ips)
	}
}

// TestCommandLine parses real command lines through the controller's flag
// set: the TLS flags in both spellings, and bad values.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantMin uint16
		wantErr string
	}{
		{nil, tls.VersionTLS13, ""},
		{[]string{"--tls-min-version=1.2", "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, tls.VersionTLS12, ""},
		{[]string{"--tls-cipher-suites=NOPE"}, 0, `unknown cipher suite "NOPE"`},
		{[]string{"--tls-min-version=VersionTLS13", "--tls-curve-preferences=P-256"}, tls.VersionTLS13, ""},
		{[]string{"--tls-curve-preferences=P-224"}, 0, `invalid --tls-curve-preferences: unknown curve "P-224"`},
	} {
		var c CommandOptions
		fs := c.FlagSet()
		fs.SetOutput(io.Discard)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := c.Validate()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: Validate() = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := c.tlsSettings().MinVersion; got != tc.wantMin {
			t.Errorf("%v: minimum %#x, want %#x", tc.args, got, tc.wantMin)
		}
	}
}

// Profiles are served only when asked for: --profiling-bind-address is
// empty by default.
func TestProfilingOffByDefault(t *testing.T) {
	var c CommandOptions
	fs := c.FlagSet()
	fs.SetOutput(io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.ProfilingAddr != "" {
		t.Errorf("--profiling-bind-address defaults to %q, want empty (off)", c.ProfilingAddr)
	}
}
