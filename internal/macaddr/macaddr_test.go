// SPDX-License-Identifier: Apache-2.0

package macaddr

import (
	"net/netip"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		ips  []netip.Addr
		want string
	}{
		{"IPv4, as OVN-Kubernetes derives it", addrs("10.0.0.5"), "0a:58:0a:00:00:05"},
		{"dual-stack: the IPv4 address, whatever the order", addrs("fd00::1:5", "10.1.2.3"), "0a:58:0a:01:02:03"},
		{"IPv4-mapped IPv6 is IPv4", addrs("::ffff:192.168.1.1"), "0a:58:c0:a8:01:01"},
		{"IPv6 only: its last four bytes, another prefix", addrs("fd00::a00:5"), "0e:58:0a:00:00:05"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mac, ok := For(tc.ips)
			if !ok || mac.String() != tc.want {
				t.Fatalf("For(%v) = %v, %v; want %s", tc.ips, mac, ok, tc.want)
			}
			if mac[0]&0x02 == 0 || mac[0]&0x01 != 0 {
				t.Fatalf("%s is not a locally administered unicast MAC", mac)
			}
			back, err := FromLabel(LabelValue(mac))
			if err != nil || back.String() != mac.String() {
				t.Fatalf("label round trip of %s: %v, %v (label %q)", mac, back, err, LabelValue(mac))
			}
		})
	}
	if mac, ok := For(nil); ok {
		t.Fatalf("For(nil) = %v, want none", mac)
	}
}

// Distinct addresses of one network derive distinct MACs: every IPv4
// address, and IPv6 addresses within 2^32 of each other.
func TestForIsInjectiveWhereDocumented(t *testing.T) {
	seen := map[string]netip.Addr{}
	check := func(ip netip.Addr) {
		mac, _ := For([]netip.Addr{ip})
		if prev, dup := seen[mac.String()]; dup {
			t.Fatalf("%s and %s both derive %s", prev, ip, mac)
		}
		seen[mac.String()] = ip
	}
	v4 := netip.MustParseAddr("10.255.255.0")
	v6 := netip.MustParseAddr("fd00::ffff:ff00") // crosses a 2^32 boundary of its low bits
	for range 512 {
		check(v4)
		check(v6)
		v4, v6 = v4.Next(), v6.Next()
	}
}

func TestFromLabelNamesTheLabel(t *testing.T) {
	for _, v := range []string{"", "0a-58", "zz-58-0a-00-00-05", "0a-58-0a-00-00-05-06-07"} {
		if _, err := FromLabel(v); err == nil {
			t.Errorf("FromLabel(%q) accepted it", v)
		} else if want := Label; !strings.Contains(err.Error(), want) {
			t.Errorf("FromLabel(%q): %v does not name %s", v, err, want)
		}
	}
}

// A claim whose owner sets its interface's MAC (OwnAnnotation) has that
// one, filled or not; a malformed annotation counts as none.
func TestOfClaimPrefersTheOwnersMAC(t *testing.T) {
	claim := &ipamclaimsv1alpha1.IPAMClaim{}
	claim.Status.IPs = []string{"10.200.0.17/24"}
	if mac, own, ok := OfClaim(claim); !ok || own || mac.String() != "0a:58:0a:c8:00:11" {
		t.Errorf("OfClaim without an own MAC = %s, %v, %v; want the derived 0a:58:0a:c8:00:11", mac, own, ok)
	}
	claim.Annotations = map[string]string{OwnAnnotation: "02:00:00:00:AA:01"}
	if mac, own, ok := OfClaim(claim); !ok || !own || mac.String() != "02:00:00:00:aa:01" {
		t.Errorf("OfClaim with %s = %s, %v, %v; want the owner's 02:00:00:00:aa:01", OwnAnnotation, mac, own, ok)
	}
	claim.Status.IPs = nil
	if _, own, ok := OfClaim(claim); !ok || !own {
		t.Errorf("OfClaim of an unfilled claim with its owner's MAC: own %v, ok %v; want both", own, ok)
	}
	claim.Annotations[OwnAnnotation] = "nonsense"
	if _, _, ok := OfClaim(claim); ok {
		t.Errorf("OfClaim of an unfilled claim with a malformed %s found a MAC", OwnAnnotation)
	}
}
