// SPDX-License-Identifier: Apache-2.0

package iprange_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

func TestUsable(t *testing.T) {
	const v4 = `{"range":"10.0.0.0/24","gateway":"10.0.0.1","exclude":["10.0.0.4/30"]}`
	tests := []struct {
		name string
		ipam string
		ip   string
		want string // "" means usable
	}{
		{"usable", v4, "10.0.0.8", ""},
		{"last usable", v4, "10.0.0.254", ""},
		{"network", v4, "10.0.0.0", "address not usable: 10.0.0.0 is the network address of range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"broadcast", v4, "10.0.0.255", "address not usable: 10.0.0.255 is the broadcast address of range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"gateway", v4, "10.0.0.1", "address not usable: 10.0.0.1 is the gateway of range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"excluded", v4, "10.0.0.6", "address not usable: 10.0.0.6 is excluded by 10.0.0.4/30 in range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"outside subnet", v4, "10.0.1.7", "address not usable: 10.0.1.7 is outside range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"other family", v4, "fd00::7", "address not usable: fd00::7 is outside range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"ipv4-mapped is another family", v4, "::ffff:10.0.0.7", "is outside range"},
		{"zoned", `{"range":"fe80::/64"}`, "fe80::7%eth0", "address not usable: fe80::7%eth0 has a zone"},
		{"below range_start", `{"range":"10.1.0.10-10.1.0.50/24"}`, "10.1.0.9", "address not usable: 10.1.0.9 is outside 10.1.0.10-10.1.0.50 of range 10.1.0.0/24 (10.1.0.10-10.1.0.50)"},
		{"above range_end", `{"range":"10.1.0.10-10.1.0.50/24"}`, "10.1.0.51", "is outside 10.1.0.10-10.1.0.50 of range"},
		{"network below range_start", `{"range":"10.1.0.10-10.1.0.50/24"}`, "10.1.0.0", "is the network address"},
		{"/31 low", `{"range":"10.0.0.0/31"}`, "10.0.0.0", ""},
		{"/31 high", `{"range":"10.0.0.0/31"}`, "10.0.0.1", ""},
		{"/32", `{"range":"10.0.0.9/32"}`, "10.0.0.9", ""},
		{"ipv6 anycast", `{"range":"fd00::/64"}`, "fd00::", "address not usable: fd00:: is the subnet-router anycast address of range fd00::/64 (fd00::1-fd00::ffff:ffff:ffff:ffff)"},
		{"ipv6 last", `{"range":"fd00::/64"}`, "fd00::ffff:ffff:ffff:ffff", ""},
		{"ipv6 excluded half", `{"range":"fd00::/64","exclude":["fd00::/65"]}`, "fd00::7fff:0:0:1", "is excluded by fd00::/65"},
		{"ipv6 /127", `{"range":"fd00::/127"}`, "fd00::", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseRange(t, tt.ipam).Usable(netip.MustParseAddr(tt.ip))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Usable = %v, want nil", err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("Usable = nil, want %q", tt.want)
			case !errors.Is(err, iprange.ErrNotUsable):
				t.Fatalf("error %v does not wrap ErrNotUsable", err)
			case strings.HasPrefix(tt.want, "address not usable: ") && err.Error() != tt.want:
				t.Fatalf("error\n got %s\nwant %s", err, tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
	if err := parseRange(t, v4).Usable(netip.Addr{}); !errors.Is(err, iprange.ErrNotUsable) {
		t.Errorf("Usable(zero Addr) = %v", err)
	}
}
