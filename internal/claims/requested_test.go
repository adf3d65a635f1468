// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

func TestWithRequests(t *testing.T) {
	want := func() []Desired {
		return []Desired{{Name: "vm1.blue", LogicalNetwork: "blue"}, {Name: "vm1.red", LogicalNetwork: "red"}}
	}
	tests := []struct {
		name        string
		annotations map[string]string
		// claim annotation value per network, "" for no request
		blue, red string
		errPart   string
	}{
		{name: "no annotation"},
		{name: "one network", annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5","fd00::5"]}`},
			blue: `["10.0.0.5","fd00::5"]`},
		{name: "unknown network ignored", annotations: map[string]string{RequestedAddressesAnnotation: `{"green":["10.0.0.5"]}`}},
		{name: "malformed holds every network", annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":"10.0.0.5"}`},
			blue: "invalid", red: "invalid", errPart: "is not a JSON object from network name to a list of addresses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withRequests(want(), tt.annotations)
			for i, w := range []string{tt.blue, tt.red} {
				r := got[i].Request
				if (r == nil) != (w == "") || (r != nil && r.claimValue() != w) {
					t.Fatalf("%s request = %+v, want %q", got[i].LogicalNetwork, r, w)
				}
				if r != nil && tt.errPart != "" && (r.err == nil || !strings.Contains(r.err.Error(), tt.errPart)) {
					t.Fatalf("%s request error = %v, want %q", got[i].LogicalNetwork, r.err, tt.errPart)
				}
			}
		})
	}
}

func TestParseRequested(t *testing.T) {
	tests := []struct {
		raw     []string
		want    string
		errPart string
	}{
		{raw: []string{"10.0.0.5"}, want: "[10.0.0.5]"},
		{raw: []string{"10.0.0.5/24", "fd00::5/64"}, want: "[10.0.0.5 fd00::5]"},
		{raw: nil, errPart: "0 addresses requested"},
		{raw: []string{"10.0.0.5", "fd00::5", "10.0.0.6"}, errPart: "3 addresses requested"},
		{raw: []string{"10.0.0.5", "10.0.0.6"}, errPart: "10.0.0.5 and 10.0.0.6 are of the same IP family"},
		{raw: []string{"ten"}, errPart: `"ten" is not an IP address`},
		{raw: []string{"fe80::1%eth0"}, errPart: "without a zone"},
		{raw: []string{"::ffff:10.0.0.5"}, errPart: "IPv4 address as IPv4"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.raw, ","), func(t *testing.T) {
			got, err := parseRequested(tt.raw)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("error = %v, want %q", err, tt.errPart)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != tt.want {
				t.Fatalf("parseRequested = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestPlaceRequested(t *testing.T) {
	v4 := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"),
		End: netip.MustParseAddr("10.0.0.200"), Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.0.16/28")}})
	v4b := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.1.0/25")})
	v6 := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("fd00::/64")})
	tests := []struct {
		name    string
		ranges  []iprange.Range
		ips     []string
		want    string // placed prefixes
		missing int    // families to allocate
		errPart string
	}{
		{name: "inside", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.5"}, want: "[10.0.0.5/24]"},
		{name: "second range of the family", ranges: []iprange.Range{v4, v4b}, ips: []string{"10.0.1.7"}, want: "[10.0.1.7/25]"},
		{name: "dual-stack, both requested", ranges: []iprange.Range{v4, v6}, ips: []string{"10.0.0.5", "fd00::5"}, want: "[10.0.0.5/24 fd00::5/64]"},
		{name: "dual-stack, one requested", ranges: []iprange.Range{v4, v6}, ips: []string{"fd00::5"}, want: "[fd00::5/64]", missing: 1},
		{name: "outside every range", ranges: []iprange.Range{v4}, ips: []string{"192.168.0.5"}, errPart: `192.168.0.5 is outside every range of IPPool "p" (10.0.0.0/24`},
		{name: "family the network lacks", ranges: []iprange.Range{v4}, ips: []string{"fd00::5"}, errPart: "fd00::5 is outside every range"},
		{name: "gateway", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.1"}, errPart: "10.0.0.1 is the gateway"},
		{name: "excluded", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.20"}, errPart: "excluded by 10.0.0.16/28"},
		{name: "past range_end", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.250"}, errPart: "is outside 10.0.0.1-10.0.0.200"},
		{name: "broadcast", ranges: []iprange.Range{v4b}, ips: []string{"10.0.1.127"}, errPart: "broadcast address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ips []netip.Addr
			for _, s := range tt.ips {
				ips = append(ips, netip.MustParseAddr(s))
			}
			got, err := placeRequested(tt.ranges, "p", ips)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("error = %v, want %q", err, tt.errPart)
				}
				return
			}
			var prefixes []netip.Prefix
			for _, p := range got {
				prefixes = append(prefixes, p.prefix())
			}
			if err != nil || fmt.Sprint(prefixes) != tt.want {
				t.Fatalf("placeRequested = %v, %v; want %s", prefixes, err, tt.want)
			}
			if m := missingFamilies(tt.ranges, got); len(m) != tt.missing {
				t.Fatalf("missing families = %v, want %d", m, tt.missing)
			}
		})
	}
}
