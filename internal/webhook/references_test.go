// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

func TestAddReferences(t *testing.T) {
	networks := []kubevirt.SecondaryNetwork{
		{Name: "blue", NetworkName: "shared", Ordinal: 1},
		{Name: "blue2", NetworkName: "shared", Ordinal: 2},
		{Name: "red", NetworkName: "red", Ordinal: 3},
	}
	hashed := func(n string) string { return kubevirt.PodInterfaceName(n) }
	tests := []struct {
		name       string
		annotation string
		persistent []bool
		want       []string // claim ref per element
		changed    bool
		warn       string
	}{
		{
			name:       "two interfaces on one NAD get two claims",
			annotation: `[{"name":"shared","namespace":"vms","interface":"` + hashed("blue") + `"},{"name":"shared","namespace":"vms","interface":"` + hashed("blue2") + `"},{"name":"red","namespace":"vms","interface":"` + hashed("red") + `"}]`,
			persistent: []bool{true, true, false},
			want:       []string{"vm1.blue", "vm1.blue2", ""},
			changed:    true,
		},
		{
			name:       "ordinal interface names",
			annotation: `[{"name":"shared","interface":"net1"},{"name":"shared","interface":"net2"}]`,
			persistent: []bool{true, true},
			want:       []string{"vm1.blue", "vm1.blue2"},
			changed:    true,
		},
		{
			name:       "no interface: position, as Multus names them",
			annotation: `[{"name":"shared"},{"name":"shared"},{"name":"red"}]`,
			persistent: []bool{false, true, true},
			want:       []string{"", "vm1.blue2", "vm1.red"},
			changed:    true,
		},
		{
			name:       "already set: unchanged",
			annotation: `[{"name":"shared","interface":"` + hashed("blue") + `","ipam-claim-reference":"vm1.blue"}]`,
			persistent: []bool{true},
			want:       []string{"vm1.blue"},
		},
		{
			name:       "another claim already referenced: left, with a warning",
			annotation: `[{"name":"shared","interface":"` + hashed("blue") + `","ipam-claim-reference":"theirs"}]`,
			persistent: []bool{true},
			want:       []string{"theirs"},
			warn:       `already references IPAMClaim "theirs"`,
		},
		{
			name:       "unknown interface: warning, no reference",
			annotation: `[{"name":"shared","interface":"eth7"}]`,
			persistent: []bool{true},
			want:       []string{""},
			warn:       "matches no network",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			elems, err := multus.ParseElements(tt.annotation, "vms")
			if err != nil {
				t.Fatal(err)
			}
			changed, warnings := addReferences(elems, "vm1", networks, tt.persistent)
			if changed != tt.changed {
				t.Errorf("changed = %v, want %v", changed, tt.changed)
			}
			for i, want := range tt.want {
				if elems[i].ClaimRef != want {
					t.Errorf("element %d ref = %q, want %q", i, elems[i].ClaimRef, want)
				}
			}
			joined := strings.Join(warnings, "\n")
			if (tt.warn == "") != (joined == "") || !strings.Contains(joined, tt.warn) {
				t.Errorf("warnings = %q, want %q", joined, tt.warn)
			}
		})
	}
}

// The webhook and the controller must agree on names, or the pod would
// reference a claim that never exists.
func TestReferenceIsTheControllersClaimName(t *testing.T) {
	networks := []kubevirt.SecondaryNetwork{{Name: "Net_A", NetworkName: "n", Ordinal: 1}}
	elems, _ := multus.ParseElements(`[{"name":"n","interface":"`+kubevirt.PodInterfaceName("Net_A")+`"}]`, "vms")
	addReferences(elems, "vm.x", networks, []bool{true})
	if want := naming.Claim("vm.x", "Net_A"); elems[0].ClaimRef != want {
		t.Errorf("ref = %q, want %q", elems[0].ClaimRef, want)
	}
}
