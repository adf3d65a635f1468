// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var extraSeeds = []string{
	netconf(`{"range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20","gateway":"10.0.0.1","exclude":["10.0.0.12/31"]}`),
	netconf(`{"range":"10.0.0.4/31"}`),
	netconf(`{"range":"10.0.0.4/32"}`),
	netconf(`{"range":"fd00::/127"}`),
	netconf(`{"range":"fd00::/64","exclude":["fd00::/65"],"gateway":"fd00:0:0:0:8000::1"}`),
	netconf(`{"range":"::/0","exclude":["::/1"]}`),
	netconf(`{"ipRanges":[{"range":"10.0.0.0/24","gateway":"10.0.0.1"},{"range":"fd00::10-fd00::20/64"}],"exclude":["fd00::14/126"]}`),
	`{"name":"n","runtimeConfig":{"ips":["10.0.0.5/24","fd00::5"]},"ipam":{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}],"dns":{"nameservers":["10.0.0.53"]}}}`,
}

func FuzzParse(f *testing.F) {
	for _, c := range errorCases {
		f.Add([]byte(c.conf))
	}
	for _, c := range whereaboutsExamples {
		f.Add([]byte(c.conf))
	}
	for _, s := range extraSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, data)
	})
}

// FuzzParseRange drives the range keys directly, which reaches the range
// arithmetic far more often than mutating raw JSON bytes.
func FuzzParseRange(f *testing.F) {
	f.Add("10.0.0.0/24", "", "", "", "")
	f.Add("10.0.0.0/30", "10.0.0.1", "10.0.0.2", "10.0.0.1/32", "10.0.0.2")
	f.Add("10.1.0.10-10.1.0.50/24", "", "10.1.0.50", "10.1.0.0/28", "10.1.0.1")
	f.Add("10.0.0.4/31", "", "", "", "10.0.0.4")
	f.Add("fd00::/64", "fd00::ffff:ffff:ffff:fff0", "", "fd00::/65", "fd00::1")
	f.Add("fd00::/127", "", "fd00::", "fd00::1", "")
	f.Add("::/0", "", "", "::/1", "")
	f.Fuzz(func(t *testing.T, rng, start, end, exclude, gw string) {
		ipam := map[string]any{"type": "ipkeeper", "range": rng}
		if start != "" {
			ipam["range_start"] = start
		}
		if end != "" {
			ipam["range_end"] = end
		}
		if exclude != "" {
			ipam["exclude"] = strings.Split(exclude, ",")
		}
		if gw != "" {
			ipam["gateway"] = gw
		}
		data, err := json.Marshal(map[string]any{"name": "fuzz", "ipam": ipam})
		if err != nil {
			t.Skip()
		}
		checkParse(t, data)
	})
}

// checkParse parses data and checks the result's invariants.
func checkParse(t *testing.T, data []byte) {
	cfg, err := ipamconfig.Parse(data)
	if err != nil {
		if cfg != nil {
			t.Fatalf("config returned with error %v", err)
		}
		var fe *ipamconfig.FieldError
		if !errors.As(err, &fe) || fe.Field == "" || !strings.HasPrefix(err.Error(), fe.Field) {
			t.Fatalf("error %q does not name its field", err)
		}
		return
	}
	if strings.TrimSpace(cfg.Name) == "" {
		t.Fatalf("empty name accepted")
	}
	if n := len(cfg.Ranges); n < 1 || n > 2 || (n == 2 && cfg.Ranges[0].Is4() == cfg.Ranges[1].Is4()) {
		t.Fatalf("want one range per family, got %v", cfg.Ranges)
	}
	for _, r := range cfg.Ranges {
		checkRange(t, r)
	}
	seen := map[bool]bool{}
	for _, p := range cfg.StaticIPs {
		r, ok := cfg.RangeFor(p.Addr())
		if !ok || p.Bits() != r.Subnet().Bits() {
			t.Fatalf("static IP %v does not match a range in %v", p, cfg.Ranges)
		}
		if seen[p.Addr().Is4()] {
			t.Fatalf("two static IPs of one family: %v", cfg.StaticIPs)
		}
		seen[p.Addr().Is4()] = true
	}
	for _, rt := range cfg.Routes {
		ones, bits := rt.Dst.Mask.Size()
		if rt.Dst.IP == nil || bits == 0 || ones > bits || (len(rt.Dst.IP) == 4) != (bits == 32) {
			t.Fatalf("bad route dst %v", rt.Dst)
		}
		if rt.GW != nil && (len(rt.GW) == 4) != (bits == 32) {
			t.Fatalf("route gw %v family differs from dst %v", rt.GW, rt.Dst)
		}
	}
}

func checkRange(t *testing.T, r iprange.Range) {
	t.Helper()
	s := r.Subnet()
	if !s.IsValid() || s != s.Masked() {
		t.Fatalf("subnet %v not valid and masked", s)
	}
	for _, a := range []netip.Addr{r.Start(), r.End()} {
		if !a.IsValid() || a.Zone() != "" || a.Is4() != s.Addr().Is4() || !s.Contains(a) {
			t.Fatalf("bound %v not a plain address inside %v", a, s)
		}
	}
	if r.End().Less(r.Start()) {
		t.Fatalf("start %v after end %v", r.Start(), r.End())
	}
	host := s.Addr().BitLen() - s.Bits()
	if host >= 2 && r.Start() == s.Addr() {
		t.Fatalf("range %v hands out its network address", r)
	}
	if host >= 2 && s.Addr().Is4() && r.End() == iprange.LastAddr(s) {
		t.Fatalf("range %v hands out its broadcast address", r)
	}
	for _, p := range r.Excludes() {
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4() != s.Addr().Is4() || !p.Overlaps(s) {
			t.Fatalf("bad exclude %v for %v", p, s)
		}
	}
	if gw := r.Gateway(); gw.IsValid() && (!s.Contains(gw) || gw.Zone() != "") {
		t.Fatalf("gateway %v outside %v", gw, s)
	}
	// No IPv4-mapped address may be handed out: the API server refuses them.
	mapped := netip.MustParsePrefix("::ffff:0:0/96")
	if !s.Addr().Is4() && !r.End().Less(mapped.Addr()) && !iprange.LastAddr(mapped).Less(r.Start()) {
		covered := false
		for _, p := range r.Excludes() {
			covered = covered || (p.Bits() <= mapped.Bits() && p.Contains(mapped.Addr()))
		}
		if !covered {
			t.Fatalf("range %v hands out IPv4-mapped addresses", r)
		}
	}
	// Parse promises something to hand out; the allocator must find it.
	ip, err := allocator.Candidate(r, nil, "fuzz")
	if err != nil {
		t.Fatalf("Candidate on parsed range %v: %v", r, err)
	}
	if err := r.Usable(ip); err != nil {
		t.Fatalf("Candidate %v not usable: %v", ip, err)
	}
	// ... and the API server must accept it in a reservation.
	if err := v1alpha1.ValidateIP(ip); err != nil {
		t.Fatalf("Candidate %v of range %v cannot be reserved: %v", ip, r, err)
	}
}
