// SPDX-License-Identifier: Apache-2.0

package guestnet_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	. "github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// A dual-stack NIC with routes and DNS, and an IPv6-only one, as netplan
// (the format's reference parser) reads them: each matched by its MAC,
// with its addresses, routes and nameservers, no DHCP.
func TestRenderIsWhatNetplanReads(t *testing.T) {
	doc, err := Render([]Interface{
		{
			ID: "blue", MAC: mustMAC("0a:58:0a:00:00:05"),
			Addresses:   []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24"), netip.MustParsePrefix("fd00::5/64")},
			Routes:      []Route{{To: netip.MustParsePrefix("10.9.0.0/16"), Via: netip.MustParseAddr("10.0.0.1")}, {To: netip.MustParsePrefix("fd09::/48")}},
			Nameservers: []string{"10.0.0.53", "fd00::53"}, Search: []string{"example.com"},
		},
		{ID: "red", MAC: mustMAC("0E:58:00:00:00:07"), Addresses: []netip.Prefix{netip.MustParsePrefix("fd01::7/120")}},
		{ID: "default", MAC: mustMAC("02:00:00:00:00:01"), DHCP: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	files, err := framework.Netplan(context.Background(), doc)
	if err != nil {
		t.Fatalf("%v\n--- document:\n%s", err, doc)
	}
	blue, red := files["10-netplan-blue.network"], files["10-netplan-red.network"]
	for _, want := range []string{"PermanentMACAddress=0a:58:0a:00:00:05", "Address=10.0.0.5/24", "Address=fd00::5/64",
		"Destination=10.9.0.0/16\nGateway=10.0.0.1", "Destination=fd09::/48", "DNS=10.0.0.53", "DNS=fd00::53", "Domains=example.com", "IPv6AcceptRA=no"} {
		if !strings.Contains(blue, want) {
			t.Errorf("blue's networkd file lacks %q:\n%s\n--- document:\n%s", want, blue, doc)
		}
	}
	if strings.Contains(blue, "DHCP=") {
		t.Errorf("blue's networkd file turns DHCP on:\n%s", blue)
	}
	for _, want := range []string{"PermanentMACAddress=0e:58:00:00:00:07", "Address=fd01::7/120", "IPv6AcceptRA=no"} {
		if !strings.Contains(red, want) {
			t.Errorf("red's networkd file lacks %q:\n%s\n--- document:\n%s", want, red, doc)
		}
	}
	// The pod network's NIC, which ipkeeper does not serve: DHCP and
	// router advertisements, as without the document.
	if dflt := files["10-netplan-default.network"]; !strings.Contains(dflt, "PermanentMACAddress=02:00:00:00:00:01") || !strings.Contains(dflt, "DHCP=yes") ||
		strings.Contains(dflt, "\nAddress=") || !strings.Contains(dflt, "IPv6AcceptRA=yes") {
		t.Errorf("default's networkd file is not DHCP by its MAC:\n%s\n--- document:\n%s", dflt, doc)
	}
	again, _ := Render([]Interface{
		{ID: "blue", MAC: mustMAC("0a:58:0a:00:00:05"), Addresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24"), netip.MustParsePrefix("fd00::5/64")},
			Routes:      []Route{{To: netip.MustParsePrefix("10.9.0.0/16"), Via: netip.MustParseAddr("10.0.0.1")}, {To: netip.MustParsePrefix("fd09::/48")}},
			Nameservers: []string{"10.0.0.53", "fd00::53"}, Search: []string{"example.com"}},
		{ID: "red", MAC: mustMAC("0e:58:00:00:00:07"), Addresses: []netip.Prefix{netip.MustParsePrefix("fd01::7/120")}},
		{ID: "default", MAC: mustMAC("02:00:00:00:00:01"), DHCP: true},
	})
	if string(again) != string(doc) {
		t.Errorf("one input, two documents:\n%s\n---\n%s", doc, again)
	}
}

// The checker is real: netplan refuses a document ipkeeper must never
// write.
func TestNetplanRefusesABadDocument(t *testing.T) {
	bad := []byte("network:\n  version: 2\n  ethernets:\n    blue:\n      match: {macaddress: \"0a:58:0a:00:00:05\"}\n      addresses: [\"10.0.0.5\"]\n")
	if _, err := framework.Netplan(context.Background(), bad); err == nil {
		t.Fatal("netplan accepted an address without a prefix length")
	}
}

func TestRenderRefuses(t *testing.T) {
	a := []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}
	for _, tc := range []struct {
		name   string
		ifaces []Interface
		want   string
	}{
		{"no ID", []Interface{{MAC: mustMAC("0a:58:0a:00:00:05"), Addresses: a}}, "without an ID"},
		{"no MAC", []Interface{{ID: "blue", Addresses: a}}, `interface "blue": MAC`},
		{"no addresses", []Interface{{ID: "blue", MAC: mustMAC("0a:58:0a:00:00:05")}}, `interface "blue": no addresses`},
		{"DHCP with addresses", []Interface{{ID: "blue", MAC: mustMAC("0a:58:0a:00:00:05"), Addresses: a, DHCP: true}}, `interface "blue": configured by DHCP, yet given addresses`},
		{"one MAC twice", []Interface{{ID: "blue", MAC: mustMAC("0a:58:0a:00:00:05"), Addresses: a}, {ID: "red", MAC: mustMAC("0A:58:0A:00:00:05"), Addresses: a}}, `"blue" and "red" have one MAC`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Render(tc.ifaces); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
