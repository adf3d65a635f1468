// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// An ipam key ipkeeper does not know is told with the key it is closest
// to ("did you mean"), never ignored silently; and a misspelling of a key
// that keeps addresses from being handed out (gateway, exclude, the range
// bounds) is refused, naming the key meant: ignored, it would hand out the
// gateway or the excluded addresses, or a wider range than written.
func TestUnknownKeys(t *testing.T) {
	for _, tt := range []struct {
		name, ipam string
		// unknown is Config.UnknownKeys, joined by "; ".
		unknown string
		// refused, when set, are parts of Parse's error, a *FieldError
		// of field refusedField.
		refused      []string
		refusedField string
	}{
		{name: "only known keys", ipam: `"range": "10.0.0.0/24", "gateway": "10.0.0.1", "exclude": ["10.0.0.5"], "network_name": "b", "sticky_mac": true, "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}], "dns": {"nameservers": ["10.0.0.2"]}, "socketPath": "/run/ipkeeper/agent.sock"`},
		{name: "a misplaced allowPersistentIPs is told elsewhere", ipam: `"range": "10.0.0.0/24", "allowPersistentIPs": true`},
		{name: "a misspelt route key", ipam: `"range": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gateway": "10.0.0.1"}], "dns": {"nameserver": ["10.0.0.2"]}`,
			unknown: `ipam.dns.nameserver (did you mean "nameservers"?); ipam.routes[0].gateway`},
		{name: "whereabouts' keys are ignored keys, not unknown", ipam: `"range": "10.0.0.0/24", "log_level": "debug", "kubernetes": {"kubeconfig": "/k"}`},
		{name: "a key read whatever its case", ipam: `"range": "10.0.0.0/24", "Gateway": "10.0.0.1"`},
		{name: "an unknown key near none", ipam: `"range": "10.0.0.0/24", "subnet": "10.0.0.0/24"`,
			unknown: `ipam.subnet`},
		{name: "a misspelt key that guards nothing", ipam: `"range": "10.0.0.0/24", "sticky_mca": true`,
			unknown: `ipam.sticky_mca (did you mean "sticky_mac"?)`},
		{name: "a misspelt whereabouts key", ipam: `"range": "10.0.0.0/24", "log_lvl": "debug"`,
			unknown: `ipam.log_lvl (did you mean "log_level"?)`},
		{name: "gatway", ipam: `"range": "10.90.3.0/24", "gatway": "10.90.3.1"`,
			refusedField: "ipam.gatway", refused: []string{`ipam.gatway: unknown key; did you mean "gateway"?`, "handed out"}},
		{name: "range_sart", ipam: `"range": "10.0.0.0/24", "range_sart": "10.0.0.200"`,
			refusedField: "ipam.range_sart", refused: []string{`did you mean "range_start"?`}},
		{name: "rangeEnd, host-local's spelling", ipam: `"range": "10.0.0.0/24", "rangeEnd": "10.0.0.50"`,
			refusedField: "ipam.rangeEnd", refused: []string{`did you mean "range_end"?`}},
		{name: "excludes", ipam: `"range": "10.0.0.0/24", "excludes": ["10.0.0.0/28"]`,
			refusedField: "ipam.excludes", refused: []string{`did you mean "exclude"?`}},
		{name: "in an ipRanges entry", ipam: `"ipRanges": [{"range": "10.0.0.0/24", "gatewy": "10.0.0.1"}]`,
			refusedField: "ipam.ipRanges[0].gatewy", refused: []string{`ipam.ipRanges[0].gatewy: unknown key; did you mean "gateway"?`}},
		{name: "an unknown key of an ipRanges entry", ipam: `"ipRanges": [{"range": "10.0.0.0/24", "comment": "lab"}]`,
			unknown: `ipam.ipRanges[0].comment`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(`{"cniVersion": "1.0.0", "name": "net", "ipam": {"type": "ipkeeper", ` + tt.ipam + `}}`))
			if tt.refused != nil {
				var fe *ipamconfig.FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("Parse = %v, %v; want a FieldError", cfg, err)
				}
				if fe.Field != tt.refusedField {
					t.Errorf("field %q, want %q", fe.Field, tt.refusedField)
				}
				for _, w := range tt.refused {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range cfg.UnknownKeys {
				got = append(got, k.String())
			}
			if s := strings.Join(got, "; "); s != tt.unknown {
				t.Errorf("UnknownKeys %q, want %q", s, tt.unknown)
			}
		})
	}
}
