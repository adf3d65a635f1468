// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// rng is a compact expected Range: subnet, start, end, gateway ("" for
// none) and excludes.
type rng struct {
	subnet, start, end, gw string
	exclude                []string
}

func (w rng) build(t *testing.T) iprange.Range {
	t.Helper()
	s := iprange.Spec{Subnet: prefix(t, w.subnet), Start: addr(t, w.start), End: addr(t, w.end)}
	if w.gw != "" {
		s.Gateway = addr(t, w.gw)
	}
	for _, e := range w.exclude {
		s.Exclude = append(s.Exclude, prefix(t, e))
	}
	r, err := iprange.New(s)
	if err != nil {
		t.Fatalf("expected range %+v: %v", w, err)
	}
	return r
}

func TestParseRanges(t *testing.T) {
	tests := []struct {
		name string
		ipam string
		want []rng
	}{
		{"ipv4 /24", `{"type":"ipkeeper","range":"10.0.0.0/24"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254"}}},
		{"host bits are masked", `{"range":"10.0.0.77/24"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254"}}},
		{"range_start and range_end", `{"range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.10", end: "10.0.0.20"}}},
		{"range_start only", `{"range":"10.0.0.0/24","range_start":"10.0.0.100"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.100", end: "10.0.0.254"}}},
		{"range_end only", `{"range":"10.0.0.0/24","range_end":"10.0.0.9"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.9"}}},
		{"network and broadcast bounds are clamped", `{"range":"10.0.0.0/24","range_start":"10.0.0.0","range_end":"10.0.0.255"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254"}}},
		{"A-B/prefix form", `{"range":"10.1.0.10-10.1.0.50/24"}`,
			[]rng{{subnet: "10.1.0.0/24", start: "10.1.0.10", end: "10.1.0.50"}}},
		{"A-B/prefix with agreeing explicit bounds", `{"range":"10.1.0.10-10.1.0.50/24","range_start":"10.1.0.10","range_end":"10.1.0.50"}`,
			[]rng{{subnet: "10.1.0.0/24", start: "10.1.0.10", end: "10.1.0.50"}}},
		{"A-B/prefix single address", `{"range":"10.1.0.10-10.1.0.10/24"}`,
			[]rng{{subnet: "10.1.0.0/24", start: "10.1.0.10", end: "10.1.0.10"}}},
		{"A-B/prefix ipv6", `{"range":"fd00::10-fd00::ff/64"}`,
			[]rng{{subnet: "fd00::/64", start: "fd00::10", end: "fd00::ff"}}},
		{"A-B/prefix on network address is clamped", `{"range":"10.1.0.0-10.1.0.255/24"}`,
			[]rng{{subnet: "10.1.0.0/24", start: "10.1.0.1", end: "10.1.0.254"}}},
		{"ipv4 /30", `{"range":"10.0.0.4/30"}`,
			[]rng{{subnet: "10.0.0.4/30", start: "10.0.0.5", end: "10.0.0.6"}}},
		{"ipv4 /31 both usable (RFC 3021)", `{"range":"10.0.0.4/31"}`,
			[]rng{{subnet: "10.0.0.4/31", start: "10.0.0.4", end: "10.0.0.5"}}},
		{"ipv4 /32 one address", `{"range":"10.0.0.4/32"}`,
			[]rng{{subnet: "10.0.0.4/32", start: "10.0.0.4", end: "10.0.0.4"}}},
		{"ipv4 /0", `{"range":"0.0.0.0/0"}`,
			[]rng{{subnet: "0.0.0.0/0", start: "0.0.0.1", end: "255.255.255.254"}}},
		{"ipv6 /64 keeps the last address", `{"range":"fd00:1::/64"}`,
			[]rng{{subnet: "fd00:1::/64", start: "fd00:1::1", end: "fd00:1::ffff:ffff:ffff:ffff"}}},
		{"ipv6 /120", `{"range":"fd00::100/120"}`,
			[]rng{{subnet: "fd00::100/120", start: "fd00::101", end: "fd00::1ff"}}},
		{"ipv6 /127 both usable (RFC 6164)", `{"range":"fd00::/127"}`,
			[]rng{{subnet: "fd00::/127", start: "fd00::", end: "fd00::1"}}},
		{"ipv6 /128 one address", `{"range":"fd00::7/128"}`,
			[]rng{{subnet: "fd00::7/128", start: "fd00::7", end: "fd00::7"}}},
		{"ipv6 /0 without the IPv4-mapped block", `{"range":"::/0","exclude":["::ffff:0:0/96"]}`,
			[]rng{{subnet: "::/0", start: "::1", end: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", exclude: []string{"::ffff:0:0/96"}}}},
		{"excludes are masked and bare IPs accepted", `{"range":"10.0.0.0/24","exclude":["10.0.0.5/30","10.0.0.200"]}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254", exclude: []string{"10.0.0.4/30", "10.0.0.200/32"}}}},
		{"exclude half of a /64", `{"range":"fd00::/64","exclude":["fd00::/65"]}`,
			[]rng{{subnet: "fd00::/64", start: "fd00::1", end: "fd00::ffff:ffff:ffff:ffff", exclude: []string{"fd00::/65"}}}},
		{"exclude outside range_start..range_end but inside subnet", `{"range":"10.0.0.0/24","range_start":"10.0.0.100","exclude":["10.0.0.0/28"]}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.100", end: "10.0.0.254", exclude: []string{"10.0.0.0/28"}}}},
		{"gateway", `{"range":"10.0.0.0/24","gateway":"10.0.0.1"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254", gw: "10.0.0.1"}}},
		{"gateway in the middle of a /30 leaves one", `{"range":"10.0.0.0/30","gateway":"10.0.0.1"}`,
			[]rng{{subnet: "10.0.0.0/30", start: "10.0.0.1", end: "10.0.0.2", gw: "10.0.0.1"}}},
		{"dual-stack ipRanges", `{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64","range_start":"fd00::10","range_end":"fd00::20","exclude":["fd00::18/125"]}]}`,
			[]rng{
				{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254"},
				{subnet: "fd00::/64", start: "fd00::10", end: "fd00::20", exclude: []string{"fd00::18/125"}},
			}},
		{"range first, then ipRanges", `{"range":"fd00::/120","ipRanges":[{"range":"10.0.0.0/24"}]}`,
			[]rng{
				{subnet: "fd00::/120", start: "fd00::1", end: "fd00::ff"},
				{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254"},
			}},
		{"top-level exclude goes to ipam.range only", `{"range":"10.0.0.0/24","exclude":["10.0.0.0/28"],"ipRanges":[{"range":"fd00::/64"}]}`,
			[]rng{
				{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254", exclude: []string{"10.0.0.0/28"}},
				{subnet: "fd00::/64", start: "fd00::1", end: "fd00::ffff:ffff:ffff:ffff"},
			}},
		{"top-level exclude without range is distributed", `{"exclude":["fd00::/120","10.0.0.0/28"],"ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.128/25"]},{"range":"fd00::/64"}]}`,
			[]rng{
				{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254", exclude: []string{"10.0.0.128/25", "10.0.0.0/28"}},
				{subnet: "fd00::/64", start: "fd00::1", end: "fd00::ffff:ffff:ffff:ffff", exclude: []string{"fd00::/120"}},
			}},
		{"top-level gateway goes to the range of its family", `{"gateway":"fd00::1","ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"}]}`,
			[]rng{
				{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254"},
				{subnet: "fd00::/64", start: "fd00::1", end: "fd00::ffff:ffff:ffff:ffff", gw: "fd00::1"},
			}},
		{"per-range gateways", `{"ipRanges":[{"range":"10.0.0.0/24","gateway":"10.0.0.254"},{"range":"fd00::/64","gateway":"fd00::1"}]}`,
			[]rng{
				{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254", gw: "10.0.0.254"},
				{subnet: "fd00::/64", start: "fd00::1", end: "fd00::ffff:ffff:ffff:ffff", gw: "fd00::1"},
			}},
		{"top-level gateway agreeing with per-range gateway", `{"gateway":"10.0.0.1","ipRanges":[{"range":"10.0.0.0/24","gateway":"10.0.0.1"}]}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.1", end: "10.0.0.254", gw: "10.0.0.1"}}},
		{"whitespace around values", `{"range":" 10.0.0.0/24 ","range_start":" 10.0.0.5"}`,
			[]rng{{subnet: "10.0.0.0/24", start: "10.0.0.5", end: "10.0.0.254"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(netconf(tt.ipam)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			var want []iprange.Range
			for _, w := range tt.want {
				want = append(want, w.build(t))
			}
			if !reflect.DeepEqual(cfg.Ranges, want) {
				t.Errorf("Ranges\n got %v\nwant %v", cfg.Ranges, want)
			}
		})
	}
}

func TestParseTopLevel(t *testing.T) {
	in := `{
		"cniVersion": "0.4.0",
		"name": "tenant-a",
		"type": "macvlan",
		"allowPersistentIPs": true,
		"runtimeConfig": {"ips": ["10.0.0.5/24"], "mac": "02:00:00:00:00:01"},
		"args": {"cni": {"ips": ["fd00::5"], "labels": [{"key": "k", "value": "v"}]}},
		"ipam": {
			"type": "ipkeeper",
			"range": "10.0.0.0/24",
			"ipRanges": [{"range": "fd00::/64"}],
			"routes": [
				{"dst": "0.0.0.0/0", "gw": "10.0.0.1"},
				{"dst": "192.168.7.9/16", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 253},
				{"dst": "::/0", "gw": "fd00::1"}
			],
			"dns": {"nameservers": ["10.0.0.53", "fe80::1%eth0"], "domain": "example.com", "search": ["svc.example.com"], "options": ["ndots:2"]},
			"etcd_host": "ignored", "log_file": "/tmp/x.log", "kubernetes": {"kubeconfig": "/x"}
		}
	}`
	cfg, err := ipamconfig.Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.Name != "tenant-a" || cfg.CNIVersion != "0.4.0" || cfg.IPAMType != "ipkeeper" || !cfg.AllowPersistentIPs {
		t.Errorf("top-level fields: %+v", cfg)
	}
	wantStatic := []netip.Prefix{prefix(t, "10.0.0.5/24"), prefix(t, "fd00::5/64")}
	if !reflect.DeepEqual(cfg.StaticIPs, wantStatic) {
		t.Errorf("StaticIPs = %v, want %v", cfg.StaticIPs, wantStatic)
	}
	table, scope := 100, 253
	wantRoutes := []*types.Route{
		{Dst: ipnet("0.0.0.0/0"), GW: net.ParseIP("10.0.0.1").To4()},
		{Dst: ipnet("192.168.0.0/16"), MTU: 1400, AdvMSS: 1360, Priority: 10, Table: &table, Scope: &scope},
		{Dst: ipnet("::/0"), GW: net.ParseIP("fd00::1")},
	}
	if !reflect.DeepEqual(cfg.Routes, wantRoutes) {
		t.Errorf("Routes\n got %v\nwant %v", cfg.Routes, wantRoutes)
	}
	wantDNS := types.DNS{Nameservers: []string{"10.0.0.53", "fe80::1%eth0"}, Domain: "example.com", Search: []string{"svc.example.com"}, Options: []string{"ndots:2"}}
	if !reflect.DeepEqual(cfg.DNS, wantDNS) {
		t.Errorf("DNS = %+v, want %+v", cfg.DNS, wantDNS)
	}
	if r, ok := cfg.RangeFor(addr(t, "fd00::5")); !ok || r.Subnet() != prefix(t, "fd00::/64") {
		t.Errorf("RangeFor(fd00::5) = %v, %v", r, ok)
	}
	if _, ok := cfg.RangeFor(addr(t, "10.9.0.1")); ok {
		t.Errorf("RangeFor(10.9.0.1) found a range")
	}
}

func ipnet(s string) net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return *n
}

func TestParseStaticIPs(t *testing.T) {
	tests := []struct {
		name string
		conf string
		want []string
	}{
		{"none", `{"name":"n","ipam":{"range":"10.0.0.0/24"}}`, nil},
		{"plain IP gets the range prefix", `{"name":"n","runtimeConfig":{"ips":["10.0.0.9"]},"ipam":{"range":"10.0.0.0/24"}}`, []string{"10.0.0.9/24"}},
		{"same IP through both channels", `{"name":"n","runtimeConfig":{"ips":["10.0.0.9/24"]},"args":{"cni":{"ips":["10.0.0.9"]}},"ipam":{"range":"10.0.0.0/24"}}`, []string{"10.0.0.9/24"}},
		{"dual-stack", `{"name":"n","runtimeConfig":{"ips":["fd00::9/64","10.0.0.9/24"]},"ipam":{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"}]}}`, []string{"fd00::9/64", "10.0.0.9/24"}},
		{"network address parses (Range.Usable rejects it)", `{"name":"n","runtimeConfig":{"ips":["10.0.0.0"]},"ipam":{"range":"10.0.0.0/24"}}`, []string{"10.0.0.0/24"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(tt.conf))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			var want []netip.Prefix
			for _, s := range tt.want {
				want = append(want, prefix(t, s))
			}
			if !reflect.DeepEqual(cfg.StaticIPs, want) {
				t.Errorf("StaticIPs = %v, want %v", cfg.StaticIPs, want)
			}
		})
	}
}

func TestParseEmptyOptionalSections(t *testing.T) {
	cfg, err := ipamconfig.Parse([]byte(`{"name":"n","ipam":{"range":"10.0.0.0/24","routes":[],"exclude":[],"dns":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routes != nil || !cfg.DNS.IsEmpty() || cfg.StaticIPs != nil || cfg.AllowPersistentIPs {
		t.Errorf("unexpected defaults: %+v", cfg)
	}
}

// TestParseAcceptsAtTheLimits pins the accepting side of the checks that keep
// out what the API server would refuse.
func TestParseAcceptsAtTheLimits(t *testing.T) {
	tests := []struct {
		name string
		conf string
	}{
		{"network name of the maximum length", `{"name":"` + strings.Repeat("n", v1alpha1.NetworkMaxLength) + `","ipam":{"range":"10.0.0.0/24"}}`},
		{"network name with dots, dashes and underscores", `{"name":"Blue_net-1.a","ipam":{"range":"10.0.0.0/24"}}`},
		{"IPv6 range ending below the IPv4-mapped block", `{"name":"n","ipam":{"range":"::/64","range_end":"::fffe:ffff:ffff"}}`},
		{"IPv6 range starting above the IPv4-mapped block", `{"name":"n","ipam":{"range":"::/64","range_start":"::1:0:0:0"}}`},
		{"IPv6 range with the IPv4-mapped block excluded", `{"name":"n","ipam":{"range":"::/64","exclude":["::ffff:0:0/96"]}}`},
		{"IPv4-compatible (not mapped) IPv6 range", `{"name":"n","ipam":{"range":"::10.0.0.0/120"}}`},
		{"zone in a DNS nameserver", `{"name":"n","ipam":{"range":"10.0.0.0/24","dns":{"nameservers":["fe80::1%eth0"]}}}`},
		{"claim reference in args.cni", `{"name":"n","args":{"cni":{"ipam-claim-reference":"vm1.blue"}},"ipam":{"range":"10.0.0.0/24"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(tt.conf))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			for _, r := range cfg.Ranges {
				checkRange(t, r)
			}
		})
	}
}

// ipam.sticky_mac makes the network read the MAC an attachment presents;
// a runtimeConfig.mac that is not one is then an error naming the field,
// and elsewhere nobody's business but the main plugin's.
func TestParseStickyMAC(t *testing.T) {
	cfg, err := ipamconfig.Parse([]byte(`{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:0A"},"ipam":{"range":"10.0.0.0/24","sticky_mac":true}}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !cfg.StickyMAC || cfg.RuntimeMAC.String() != "02:00:00:00:00:0a" {
		t.Errorf("StickyMAC %v, RuntimeMAC %v; want true, 02:00:00:00:00:0a", cfg.StickyMAC, cfg.RuntimeMAC)
	}
	for _, c := range []struct{ conf, field, detail string }{
		{`{"name":"n","runtimeConfig":{"mac":"zz"},"ipam":{"range":"10.0.0.0/24","sticky_mac":true}}`, "runtimeConfig.mac", `"zz" is not an Ethernet MAC address`},
		{`{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:00:00:01"},"ipam":{"range":"10.0.0.0/24","sticky_mac":true}}`, "runtimeConfig.mac", "not an Ethernet MAC"},
		{`{"name":"n","ipam":{"range":"10.0.0.0/24","sticky_mac":"yes"}}`, "ipam.sticky_mac", "expected a boolean"},
	} {
		_, err := ipamconfig.Parse([]byte(c.conf))
		var fe *ipamconfig.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("Parse(%s) = %v; want an error of field %s saying %q", c.conf, err, c.field, c.detail)
		}
	}
	cfg, err = ipamconfig.Parse([]byte(`{"name":"n","runtimeConfig":{"mac":"zz"},"ipam":{"range":"10.0.0.0/24"}}`))
	if err != nil || cfg.StickyMAC || cfg.RuntimeMAC != nil {
		t.Errorf("Parse without sticky_mac, with a bad runtimeConfig.mac: %+v, %v; want it not read", cfg, err)
	}
}
