// SPDX-License-Identifier: Apache-2.0

package naming

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestReservation(t *testing.T) {
	tests := []struct {
		name    string
		network string
		ip      string
		want    string
	}{
		{"plain network, IPv4", "blue", "10.1.2.3", "blue.10-1-2-3"},
		{"plain network, IPv6", "blue", "fd00::1", "blue.fd00-0000-0000-0000-0000-0000-0000-0001"},
		{"IPv4-mapped IPv6 is the IPv4 address", "blue", "::ffff:10.1.2.3", "blue.10-1-2-3"},
		{"uppercase network is hashed", "Blue", "10.0.0.1", "blue.2bba6f2ad0f9e2a1db2d6c1d5b2a4b57.10-0-0-1"},
		{"dots are hashed", "a.b", "10.0.0.1", "a-b.32c8f0dc4e0ec6ac4b85cf97f1b0e1c6.10-0-0-1"},
		{"only symbols", "___", "10.0.0.1", "net.e7f9e8d7e2cc40f17a51ed4ba36d3a56.10-0-0-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Reservation(tt.network, netip.MustParseAddr(tt.ip))
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Fatalf("Reservation(%q, %s) = %q is not a DNS-1123 subdomain: %v", tt.network, tt.ip, got, errs)
			}
			// Hashes are checked by prefix and shape only; the table pins the readable part.
			if len(tt.want) > 0 && !sameShape(got, tt.want) {
				t.Errorf("Reservation(%q, %s) = %q, want %q", tt.network, tt.ip, got, tt.want)
			}
		})
	}
}

// sameShape compares names, treating a 32-hex-char hash label as a wildcard.
func sameShape(got, want string) bool {
	g, w := splitDots(got), splitDots(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if len(w) == 3 && i == 1 {
			if len(g[i]) != 32 {
				return false
			}
			continue
		}
		if g[i] != w[i] {
			return false
		}
	}
	return true
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// TestReservationInjective covers the pairs naive schemes map to one name.
func TestReservationInjective(t *testing.T) {
	long := make([]byte, 63)
	for i := range long {
		long[i] = 'a'
	}
	pairs := [][2]string{
		{"net", "net-"},
		{"a", "A"},
		{"a-b", "a.b"},
		{"a-b", "a_b"},
		{"a.b", "a_b"},
		{"net", "net.10-0-0-1"},
		{string(long), string(long) + "a"},
		{"sha256-x", "sha256_x"},
	}
	ip := netip.MustParseAddr("10.0.0.1")
	for _, p := range pairs {
		if Reservation(p[0], ip) == Reservation(p[1], ip) {
			t.Errorf("networks %q and %q map to the same name %q", p[0], p[1], Reservation(p[0], ip))
		}
	}
	v4 := netip.MustParseAddr("0.0.0.1")
	v6 := netip.MustParseAddr("::1")
	if Reservation("n", v4) == Reservation("n", v6) {
		t.Errorf("IPv4 %s and IPv6 %s share a name", v4, v6)
	}
}

func TestNetworkLabelValue(t *testing.T) {
	for _, network := range []string{"blue", "Blue_net.1", "a b", string(make([]byte, 100))} {
		v := NetworkLabelValue(network)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("NetworkLabelValue(%q) = %q is not a label value: %v", network, v, errs)
		}
	}
	if NetworkLabelValue("blue") != "blue" {
		t.Errorf("a valid label value must be kept as-is")
	}
}

func FuzzName(f *testing.F) {
	f.Add("blue", "10.0.0.1", "blue.", "10.0.0.1")
	f.Add("a.b", "fd00::1", "a-b", "fd00::1")
	f.Add("Net_1", "::ffff:1.2.3.4", "net-1", "1.2.3.4")
	f.Fuzz(func(t *testing.T, n1, ip1, n2, ip2 string) {
		a1, err1 := netip.ParseAddr(ip1)
		a2, err2 := netip.ParseAddr(ip2)
		if err1 != nil || err2 != nil {
			return
		}
		name1 := Reservation(n1, a1)
		if errs := validation.IsDNS1123Subdomain(name1); len(errs) > 0 {
			t.Fatalf("Reservation(%q, %s) = %q: %v", n1, a1, name1, errs)
		}
		same := n1 == n2 && a1.Unmap().WithZone("") == a2.Unmap().WithZone("")
		if !same && name1 == Reservation(n2, a2) {
			t.Fatalf("(%q, %s) and (%q, %s) share the name %q", n1, a1, n2, a2, name1)
		}
	})
}

func TestInlinePool(t *testing.T) {
	for _, tt := range []struct{ network, want string }{
		{"blue", "blue"},
		{"blue.net", "blue.net"},
		{"Blue_Net", "blue-net."},
	} {
		got := InlinePool(tt.network)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("InlinePool(%q) = %q is not an object name: %v", tt.network, got, errs)
		}
		hashed := strings.HasSuffix(tt.want, ".") && len(got) == len(tt.want)+32 && strings.HasPrefix(got, tt.want)
		if got != tt.want && !hashed {
			t.Errorf("InlinePool(%q) = %q, want %q", tt.network, got, tt.want)
		}
	}
	if InlinePool("Blue_Net") == InlinePool("blue_net") {
		t.Errorf("distinct networks share an inline pool")
	}
}
