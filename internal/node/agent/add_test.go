// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// netconf wraps an ipam object in a typical Multus macvlan network config.
func netconf(ipam string) string {
	return `{"cniVersion":"1.0.0","name":"storage","type":"macvlan","master":"eth0","mode":"bridge","ipam":` + ipam + `}`
}

func TestBuildResult(t *testing.T) {
	const (
		routesDNS = `"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.1.0.254"}],` +
			`"dns":{"nameservers":["10.96.0.10","fd00::10"],"domain":"cluster.local","search":["shop.svc.cluster.local"],"options":["ndots:5"]}`
	)
	type ipWant struct {
		addr    string // Address.String(): IP and prefix length
		ones    int    // mask
		bits    int
		gateway string // "" for none
	}
	tests := []struct {
		name   string
		conf   string
		ips    []string
		want   []ipWant
		routes []string // "dst via gw"
	}{
		{
			name: "IPv4 with gateway, routes and DNS",
			conf: netconf(`{"type":"ipkeeper","range":"10.1.0.0/16","gateway":"10.1.0.1",` + routesDNS + `}`),
			ips:  []string{"10.1.2.3/16"},
			want: []ipWant{{"10.1.2.3/16", 16, 32, "10.1.0.1"}},
			routes: []string{
				"0.0.0.0/0 via <nil>",
				"192.168.0.0/16 via 10.1.0.254",
			},
		},
		{
			name: "IPv4 without gateway",
			conf: netconf(`{"type":"ipkeeper","range":"10.1.0.0/28"}`),
			ips:  []string{"10.1.0.9/28"},
			want: []ipWant{{"10.1.0.9/28", 28, 32, ""}},
		},
		{
			name: "dual-stack, gateway on IPv4 only",
			conf: netconf(`{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24","gateway":"10.1.0.1"},{"range":"fd00:1::/64"}],` + routesDNS + `}`),
			ips:  []string{"10.1.0.7/24", "fd00:1::7/64"},
			want: []ipWant{{"10.1.0.7/24", 24, 32, "10.1.0.1"}, {"fd00:1::7/64", 64, 128, ""}},
			routes: []string{
				"0.0.0.0/0 via <nil>",
				"192.168.0.0/16 via 10.1.0.254",
			},
		},
		{
			name: "dual-stack, gateway on IPv6 only",
			conf: netconf(`{"type":"ipkeeper","ipRanges":[{"range":"10.2.0.0/20"},{"range":"fd00:2::/112","gateway":"fd00:2::1"}]}`),
			ips:  []string{"10.2.3.4/20", "fd00:2::abcd/112"},
			want: []ipWant{{"10.2.3.4/20", 20, 32, ""}, {"fd00:2::abcd/112", 112, 128, "fd00:2::1"}},
		},
		{
			name: "dual-stack, IPv6 range first, both gateways",
			conf: netconf(`{"type":"ipkeeper","ipRanges":[{"range":"fd00:3::/64","gateway":"fd00:3::1"},{"range":"10.3.0.0/16","gateway":"10.3.255.254"}]}`),
			ips:  []string{"fd00:3::5/64", "10.3.0.5/16"},
			want: []ipWant{{"fd00:3::5/64", 64, 128, "fd00:3::1"}, {"10.3.0.5/16", 16, 32, "10.3.255.254"}},
		},
		{
			name: "IPv6 only",
			conf: netconf(`{"type":"ipkeeper","range":"fd00:4::/120","gateway":"fd00:4::1"}`),
			ips:  []string{"fd00:4::2/120"},
			want: []ipWant{{"fd00:4::2/120", 120, 128, "fd00:4::1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.conf)
			var ips []netip.Prefix
			for _, s := range tt.ips {
				ips = append(ips, netip.MustParsePrefix(s))
			}

			res := buildResult(&request{cfg: cfg, pool: &ipam.Pool{Name: cfg.PoolName(), Ranges: cfg.Ranges}}, ips)

			if res.CNIVersion != "1.1.0" {
				t.Errorf("cniVersion = %q, want 1.1.0", res.CNIVersion)
			}
			if res.Interfaces != nil {
				t.Errorf("interfaces = %+v, want none (the main plugin assigns them)", res.Interfaces)
			}
			if len(res.IPs) != len(tt.want) {
				t.Fatalf("%d IPs, want %d: %v", len(res.IPs), len(tt.want), res.IPs)
			}
			for i, w := range tt.want {
				ipc := res.IPs[i]
				if got := ipc.Address.String(); got != w.addr {
					t.Errorf("IPs[%d].address = %s, want %s", i, got, w.addr)
				}
				if ones, bits := ipc.Address.Mask.Size(); ones != w.ones || bits != w.bits {
					t.Errorf("IPs[%d] mask = /%d of %d bits, want /%d of %d", i, ones, bits, w.ones, w.bits)
				}
				if (ipc.Address.IP.To4() != nil) != (w.bits == 32) {
					t.Errorf("IPs[%d] address %s is of the wrong family", i, ipc.Address.IP)
				}
				gw := ""
				if ipc.Gateway != nil {
					gw = ipc.Gateway.String()
				}
				if gw != w.gateway {
					t.Errorf("IPs[%d].gateway = %q, want %q", i, gw, w.gateway)
				}
				if ipc.Interface != nil {
					t.Errorf("IPs[%d].interface = %d, want unset", i, *ipc.Interface)
				}
			}

			var routes []string
			for i, r := range res.Routes {
				routes = append(routes, r.Dst.String()+" via "+r.GW.String())
				if r == cfg.Routes[i] {
					t.Errorf("routes[%d] is the config's own route, not a copy", i)
				}
			}
			if strings.Join(routes, ";") != strings.Join(tt.routes, ";") {
				t.Errorf("routes = %q, want %q", routes, tt.routes)
			}
			if !reflect.DeepEqual(res.DNS, cfg.DNS) {
				t.Errorf("dns = %+v, want the config's %+v", res.DNS, cfg.DNS)
			}
			if strings.Contains(tt.conf, `"dns"`) && (len(res.DNS.Nameservers) != 2 || res.DNS.Domain != "cluster.local" || len(res.DNS.Search) != 1 || len(res.DNS.Options) != 1) {
				t.Errorf("dns not copied: %+v", res.DNS)
			}

			// What the shim sends: no interface references anywhere, and
			// convertible to every version a runtime may ask for.
			out, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), `"interface`) {
				t.Errorf("result JSON mentions interfaces: %s", out)
			}
			for _, v := range []string{"1.0.0", "0.4.0", "0.3.1"} {
				if _, err := res.GetAsVersion(v); err != nil {
					t.Errorf("converting to %s: %v", v, err)
				}
			}
		})
	}
}

func TestHeldIn(t *testing.T) {
	cfg := mustParse(t, netconf(`{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24"},{"range":"fd00:1::/64"}]}`))
	v4, v6 := cfg.Ranges[0], cfg.Ranges[1]
	e4 := podEntry(t, "storage", "10.1.0.7", "p", "net1", "c")
	e6 := podEntry(t, "storage", "fd00:1::7", "p", "net1", "c")
	outside := podEntry(t, "storage", "10.2.0.7", "p", "net1", "c") // the range shrank since
	tests := []struct {
		name   string
		held   []entry
		r      iprange.Range
		want   entry
		wantOK bool
	}{
		{"nothing held", nil, v4, entry{}, false},
		{"IPv4 of dual-stack", []entry{e6, e4}, v4, e4, true},
		{"IPv6 of dual-stack", []entry{e4, e6}, v6, e6, true},
		{"only the other family", []entry{e4}, v6, entry{}, false},
		{"address outside the ranges now is still held", []entry{outside}, v4, outside, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := heldIn(tt.held, tt.r.Is4())
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("heldIn(%v, %s) = %s, %v, want %s, %v", sortedNames(tt.held), tt.r, got.Name, ok, tt.want.Name, tt.wantOK)
			}
		})
	}
}

func TestStaticFor(t *testing.T) {
	tests := []struct {
		name string
		conf string
		want []string // per range, "" for none
	}{
		{"none requested", netconf(`{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24"},{"range":"fd00:1::/64"}]}`), []string{"", ""}},
		{
			"IPv4 requested through runtimeConfig",
			`{"cniVersion":"1.0.0","name":"storage","type":"macvlan","runtimeConfig":{"ips":["10.1.0.50/24"]},"ipam":{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24"},{"range":"fd00:1::/64"}]}}`,
			[]string{"10.1.0.50", ""},
		},
		{
			"both families, IPv6 through args",
			`{"cniVersion":"1.0.0","name":"storage","type":"macvlan","runtimeConfig":{"ips":["10.1.0.50"]},"args":{"cni":{"ips":["fd00:1::50"]}},"ipam":{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24"},{"range":"fd00:1::/64"}]}}`,
			[]string{"10.1.0.50", "fd00:1::50"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.conf)
			for i, r := range cfg.Ranges {
				got, ok := staticFor(cfg, r.Is4())
				if ok != (tt.want[i] != "") || (ok && got.String() != tt.want[i]) {
					t.Errorf("staticFor(range %s) = %s, %v, want %q", r, got, ok, tt.want[i])
				}
			}
		})
	}
}

func TestEntryOf(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	base := func(ip string) *ipkeeperv1alpha1.IPReservation {
		return &ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: "storage.x", UID: "r-uid", CreationTimestamp: metav1.Time{Time: created}},
			Spec: ipkeeperv1alpha1.IPReservationSpec{
				Pool: "storage", Network: "storage", IP: ip,
				Owner:         ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "pod", UID: "pod-uid"},
				InterfaceName: "net1", ContainerID: "sandbox", Node: "worker-1",
			},
		}
	}
	tests := []struct {
		name   string
		ip     string
		wantIP string
		wantOK bool
	}{
		{"IPv4", "10.1.0.7", "10.1.0.7", true},
		{"IPv6", "fd00::7", "fd00::7", true},
		{"not an address", "10.1.0", "", false},
		{"a prefix is not an address", "10.1.0.7/24", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := index.EntryOf(base(tt.ip))
			if ok != tt.wantOK {
				t.Fatalf("entryOf(ip %q) ok = %v, want %v", tt.ip, ok, tt.wantOK)
			}
			if !ok {
				return
			}
			want := entry{
				Name: "storage.x", UID: "r-uid", Pool: "storage", Network: "storage", IP: netip.MustParseAddr(tt.wantIP),
				Owner:         ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "pod", UID: "pod-uid"},
				InterfaceName: "net1", ContainerID: "sandbox", Node: "worker-1", Created: created, Attached: created,
			}
			if e != want {
				t.Errorf("entryOf =\n  %+v\nwant\n  %+v", e, want)
			}
		})
	}
}
