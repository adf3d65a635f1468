// SPDX-License-Identifier: Apache-2.0

package guestnet

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Interface is what the guest configures on one NIC: the addresses its
// claim records, matched by the NIC's MAC, with the routes and DNS of its
// network's definition (what the CNI result gives the pod interface).
type Interface struct {
	// ID names the entry: the VM's network name.
	ID string
	// MAC is the NIC's: the VM interface's own macAddress, else its claim's.
	MAC net.HardwareAddr
	// Addresses are the claim's status.ips, with their prefix lengths.
	Addresses []netip.Prefix
	// Routes are the network's ipam.routes; Via is the route's gw, else
	// the gateway of the address's range of that family, else none
	// (on-link).
	Routes []Route
	// Nameservers and Search are the network's ipam.dns.
	Nameservers []string
	Search      []string
	// DHCP: a NIC ipkeeper does not serve (the pod network, another
	// IPAM's network), which the guest configures by DHCP and router
	// advertisements as it would without this configuration; it has no
	// Addresses, Routes or DNS here.
	DHCP bool
}

// Route is one route of an Interface.
type Route struct {
	To  netip.Prefix
	Via netip.Addr
}

// The network config version 2 document (netplan's format, which
// cloud-init reads from a NoCloud networkdata): only what ipkeeper writes.
type document struct {
	Network networkV2 `json:"network"`
}

type networkV2 struct {
	Version   int                 `json:"version"`
	Ethernets map[string]ethernet `json:"ethernets"`
}

type ethernet struct {
	Match       match        `json:"match"`
	DHCP4       bool         `json:"dhcp4"`
	DHCP6       bool         `json:"dhcp6"`
	AcceptRA    bool         `json:"accept-ra"`
	Addresses   []string     `json:"addresses,omitempty"`
	Routes      []route      `json:"routes,omitempty"`
	Nameservers *nameservers `json:"nameservers,omitempty"`
}

type match struct {
	MACAddress string `json:"macaddress"`
}

type route struct {
	To  string `json:"to"`
	Via string `json:"via,omitempty"`
}

type nameservers struct {
	Addresses []string `json:"addresses,omitempty"`
	Search    []string `json:"search,omitempty"`
}

// Render writes the network config version 2 of ifaces: each NIC found by
// its MAC, given its addresses statically (no DHCP, no router
// advertisements: the addresses are the IPAM's, IPv6 included, which
// KubeVirt's bridge binding cannot hand out), but for the NICs ipkeeper
// does not serve, left to DHCP (the document replaces the guest's
// default configuration, so a NIC it omits stays unconfigured). The output is stable: one
// input, one document, so an unchanged VM means an unchanged Secret.
func Render(ifaces []Interface) ([]byte, error) {
	doc := document{Network: networkV2{Version: 2, Ethernets: map[string]ethernet{}}}
	macs := map[string]string{}
	for _, ifc := range ifaces {
		if ifc.ID == "" {
			return nil, fmt.Errorf("an interface without an ID (MAC %s)", ifc.MAC)
		}
		if _, dup := doc.Network.Ethernets[ifc.ID]; dup {
			return nil, fmt.Errorf("interface %q: listed twice", ifc.ID)
		}
		if len(ifc.MAC) != 6 {
			return nil, fmt.Errorf("interface %q: MAC %q is not a 48-bit MAC address", ifc.ID, ifc.MAC)
		}
		// netplan matches lowercase MACs only.
		mac := strings.ToLower(ifc.MAC.String())
		if other, dup := macs[mac]; dup {
			return nil, fmt.Errorf("interfaces %q and %q have one MAC %s: the guest could not tell them apart", other, ifc.ID, mac)
		}
		macs[mac] = ifc.ID
		if ifc.DHCP {
			if len(ifc.Addresses) > 0 || len(ifc.Routes) > 0 || len(ifc.Nameservers) > 0 {
				return nil, fmt.Errorf("interface %q: configured by DHCP, yet given addresses, routes or DNS", ifc.ID)
			}
			doc.Network.Ethernets[ifc.ID] = ethernet{Match: match{MACAddress: mac}, DHCP4: true, DHCP6: true, AcceptRA: true}
			continue
		}
		if len(ifc.Addresses) == 0 {
			return nil, fmt.Errorf("interface %q: no addresses", ifc.ID)
		}
		e := ethernet{Match: match{MACAddress: mac}}
		for _, a := range ifc.Addresses {
			e.Addresses = append(e.Addresses, a.String())
		}
		for _, r := range ifc.Routes {
			rt := route{To: r.To.String()}
			if r.Via.IsValid() {
				rt.Via = r.Via.String()
			}
			e.Routes = append(e.Routes, rt)
		}
		if len(ifc.Nameservers) > 0 || len(ifc.Search) > 0 {
			e.Nameservers = &nameservers{Addresses: slices.Clone(ifc.Nameservers), Search: slices.Clone(ifc.Search)}
		}
		doc.Network.Ethernets[ifc.ID] = e
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the network config: %w", err)
	}
	return out, nil
}
