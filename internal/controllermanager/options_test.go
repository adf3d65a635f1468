// SPDX-License-Identifier: Apache-2.0

package controllermanager

import (
	"flag"
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
		{"tls 1.1", func(o *Options) { o.TLSMinVersion = "1.1" }, `--webhook-tls-min-version "1.1"`},
		{"cert mode", func(o *Options) { o.CertMode = "manual" }, `--webhook-cert-mode "manual"`},
		{"provided without dir", func(o *Options) { o.CertMode = CertsProvided; o.CertDir = "" }, "--webhook-cert-dir"},
		{"port", func(o *Options) { o.WebhookPort = 70000 }, "--webhook-port 70000"},
		{"grace", func(o *Options) { o.GCGracePeriod = -time.Second }, "--gc-grace-period -1s"},
		{"namespace", func(o *Options) { o.Namespace = "" }, "--namespace"},
		{"validity", func(o *Options) { o.CAValidity = time.Hour }, "--webhook-ca-validity 1h0m0s"},
		{"webhook off skips webhook checks", func(o *Options) { o.EnableWebhook = false; o.TLSMinVersion = "x" }, ""},
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
