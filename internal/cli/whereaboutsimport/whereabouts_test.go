// SPDX-License-Identifier: Apache-2.0

package whereaboutsimport

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

func TestAddresses(t *testing.T) {
	tests := []struct {
		name    string
		pool    Pool
		want    []string // ip podns/podname ifname network
		wantErr []string
	}{
		{"offsets count from the range's address", Pool{Namespace: "kube-system", Name: "10.1.0.0-24", Range: "10.1.0.0/24",
			Allocations: map[string]Allocation{"7": {ContainerID: "c7", PodRef: "a/p7", IfName: "net1"}, "1": {PodRef: "a/p1", IfName: "net2"}}},
			[]string{"10.1.0.1 a/p1 net2 ", "10.1.0.7 a/p7 net1 "}, nil},
		{"network_name prefix", Pool{Namespace: "kube-system", Name: "blue-10.1.0.0-24", Range: "10.1.0.0/24",
			Allocations: map[string]Allocation{"300": {PodRef: "a/p"}}}, nil, []string{`key "300": offset outside spec.range`}},
		{"network_name read back", Pool{Namespace: "kube-system", Name: "blue-10.1.0.0-24", Range: "10.1.0.0/24",
			Allocations: map[string]Allocation{"5": {PodRef: "a/p", IfName: "net1"}}}, []string{"10.1.0.5 a/p net1 blue"}, nil},
		{"IPv6", Pool{Namespace: "kube-system", Name: "fd00-10---64", Range: "fd00:10::/64",
			Allocations: map[string]Allocation{"65536": {PodRef: "a/p", IfName: "net1"}}}, []string{"fd00:10::1:0 a/p net1 "}, nil},
		{"bad key and podref reported, the rest listed", Pool{Namespace: "kube-system", Name: "10.1.0.0-24", Range: "10.1.0.0/24",
			Allocations: map[string]Allocation{"x": {PodRef: "a/p"}, "3": {PodRef: "nopod"}, "4": {PodRef: "a/p4"}}},
			[]string{"10.1.0.4 a/p4  "}, []string{`key "x": not a decimal offset`, `podref "nopod": want namespace/name`}},
		{"bad range", Pool{Namespace: "kube-system", Name: "x", Range: "10.1.0.0"}, nil, []string{`spec.range "10.1.0.0": not a CIDR`}},
		{"node-slice pool name", Pool{Namespace: "kube-system", Name: "blue-node1-10.1.0.0-26", Range: "10.1.0.0/24"}, nil, []string{"does not end in its spec.range"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := Addresses(tt.pool)
			var lines []string
			for _, a := range got {
				lines = append(lines, a.IP.String()+" "+a.PodNamespace+"/"+a.PodName+" "+a.IfName+" "+a.NetworkName)
			}
			if strings.Join(lines, "|") != strings.Join(tt.want, "|") {
				t.Errorf("addresses %q, want %q", lines, tt.want)
			}
			if len(errs) != len(tt.wantErr) {
				t.Fatalf("errors %v, want %d", errs, len(tt.wantErr))
			}
			for _, w := range tt.wantErr {
				found := false
				for _, e := range errs {
					found = found || strings.Contains(e.Error(), w)
				}
				if !found {
					t.Errorf("no error containing %q in %v", w, errs)
				}
			}
		})
	}
}

func TestNormalizedName(t *testing.T) {
	tests := []struct{ ip, network, want string }{
		{"10.1.0.5", "", "10.1.0.5"},
		{"10.1.0.5", "blue", "blue-10.1.0.5"},
		{"fd00::5", "", "fd00--5"},
		{"fd00::", "blue", "blue-fd00--0"},
	}
	for _, tt := range tests {
		if got := NormalizedName(netip.MustParseAddr(tt.ip), tt.network); got != tt.want {
			t.Errorf("NormalizedName(%s, %q) = %q, want %q", tt.ip, tt.network, got, tt.want)
		}
	}
}

func TestNetworks(t *testing.T) {
	parse := func(conf string) *ipamconfig.Config {
		c, err := ipamconfig.Parse([]byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	nets := []Network{
		{"a/plain", parse(`{"name":"plain","ipam":{"type":"whereabouts","range":"10.1.0.0/24"}}`)},
		{"b/plain-too", parse(`{"name":"plain","ipam":{"type":"whereabouts","range":"10.1.0.10-10.1.0.20/24"}}`)},
		{"a/blue", parse(`{"name":"blue","ipam":{"type":"whereabouts","range":"10.1.0.0/24","network_name":"blue"}}`)},
		{"a/other", parse(`{"name":"other","ipam":{"type":"whereabouts","range":"10.2.0.0/24"}}`)},
	}
	tests := []struct {
		name string
		addr Address
		want string
	}{
		{"same range, no network_name", Address{Subnet: netip.MustParsePrefix("10.1.0.0/24")}, "a/plain b/plain-too"},
		{"network_name keeps pools apart", Address{Subnet: netip.MustParsePrefix("10.1.0.0/24"), NetworkName: "blue"}, "a/blue"},
		{"no NAD", Address{Subnet: netip.MustParsePrefix("10.9.0.0/24")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, n := range Networks(tt.addr, nets) {
				got = append(got, n.NAD)
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
