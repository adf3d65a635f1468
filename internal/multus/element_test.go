// SPDX-License-Identifier: Apache-2.0

package multus

import (
	"errors"
	"testing"
)

func TestElementFor(t *testing.T) {
	// NADs of the namespace and their CNI network names.
	networks := map[string]string{"blue": "net-blue", "blue2": "net-blue", "red": "net-red"}
	networkOf := func(e Element) (string, error) { return networks[e.Name], nil }
	parse := func(annotation string) []Element {
		elems, err := ParseElements(annotation, "vms")
		if err != nil {
			t.Fatal(err)
		}
		return elems
	}
	tests := []struct {
		name       string
		annotation string
		at         Attachment
		want       int
		undecided  bool
	}{
		{"by interface", `[{"name":"red","interface":"eth1"},{"name":"blue","interface":"pod1"}]`,
			Attachment{IfName: "pod1", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: -1}, 1, false},
		{"by network, one default network shifts positions", `[{"name":"red"},{"name":"blue"}]`,
			Attachment{IfName: "net3", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: -1}, 1, false},
		// Without default networks net2 would be the second element; with
		// one default network Multus names the first element net2.
		{"by position with one default network", `[{"name":"blue"},{"name":"blue2"}]`,
			Attachment{IfName: "net2", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: 1}, 0, false},
		{"by position without default networks", `[{"name":"blue"},{"name":"blue2"}]`,
			Attachment{IfName: "net2", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: 0}, 1, false},
		{"elements with an interface request count in positions", `[{"name":"red","interface":"eth9"},{"name":"blue"},{"name":"blue2"}]`,
			Attachment{IfName: "net4", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: 1}, 2, false},
		{"same network twice, default networks unknown", `[{"name":"blue"},{"name":"blue2"}]`,
			Attachment{IfName: "net2", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: -1}, -1, true},
		{"same network twice, position fits neither", `[{"name":"blue"},{"name":"blue2"}]`,
			Attachment{IfName: "net7", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: 0}, -1, true},
		{"network of no element: a default network's attachment", `[{"name":"red"}]`,
			Attachment{IfName: "net1", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: -1}, -1, false},
		{"every element names another interface", `[{"name":"blue","interface":"eth1"}]`,
			Attachment{IfName: "net1", Network: "net-blue", NetworkOf: networkOf, DefaultNetworks: 0}, -1, false},
		{"short form, by position", `blue, blue2@eth5, red`,
			Attachment{IfName: "net3", Network: "net-red", DefaultNetworks: 0}, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ElementFor(parse(tt.annotation), tt.at)
			if tt.undecided != errors.Is(err, ErrUndecidable) || (err != nil && !tt.undecided) {
				t.Fatalf("ElementFor() error = %v, want undecidable %v", err, tt.undecided)
			}
			if got != tt.want {
				t.Fatalf("ElementFor() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestFindElement(t *testing.T) {
	// Without a claim reference no NAD may be read.
	noNADs := func(e Element) (string, error) { t.Fatalf("read the NAD of %s", e.Name); return "", nil }
	tests := []struct {
		name       string
		annotation string
		at         Attachment
		want       int
		undecided  bool
	}{
		{"no claim: by interface", `[{"name":"red"},{"name":"blue","interface":"pod1"}]`,
			Attachment{IfName: "pod1", NetworkOf: noNADs, DefaultNetworks: -1}, 1, false},
		{"no claim: the first element without interface", `[{"name":"red","interface":"eth1"},{"name":"blue"},{"name":"green"}]`,
			Attachment{IfName: "net9", NetworkOf: noNADs, DefaultNetworks: -1}, 1, false},
		{"no claim: not listed", `[{"name":"red","interface":"eth1"}]`,
			Attachment{IfName: "net1", NetworkOf: noNADs, DefaultNetworks: -1}, -1, false},
		{"a claim: ElementFor decides", `[{"name":"blue"},{"name":"blue2","ipam-claim-reference":"vm.blue"}]`,
			Attachment{IfName: "net2", Network: "net-blue", NetworkOf: func(Element) (string, error) { return "net-blue", nil }, DefaultNetworks: -1}, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			elems, err := ParseElements(tt.annotation, "vms")
			if err != nil {
				t.Fatal(err)
			}
			got, err := FindElement(elems, tt.at)
			if tt.undecided != errors.Is(err, ErrUndecidable) || (err != nil && !tt.undecided) {
				t.Fatalf("FindElement() error = %v, want undecidable %v", err, tt.undecided)
			}
			if got != tt.want {
				t.Fatalf("FindElement() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestDelegateIfName(t *testing.T) {
	if got := DelegateIfName(3); got != "net3" {
		t.Errorf("DelegateIfName(3) = %q, want net3", got)
	}
}

func TestDefaultNetworks(t *testing.T) {
	tests := []struct {
		name       string
		configured int
		system     []string
		namespace  string
		want       int
	}{
		{"unknown", -1, nil, "vms", -1},
		{"one", 1, nil, "vms", 1},
		{"Multus' default system namespace gets none", 2, nil, "kube-system", 0},
		{"configured system namespaces", 2, []string{"infra"}, "infra", 0},
		{"kube-system is not special once others are configured", 2, []string{"infra"}, "kube-system", 2},
	}
	for _, tt := range tests {
		if got := DefaultNetworks(tt.namespace, tt.configured, tt.system); got != tt.want {
			t.Errorf("%s: DefaultNetworks(%q) = %d, want %d", tt.name, tt.namespace, got, tt.want)
		}
	}
}
