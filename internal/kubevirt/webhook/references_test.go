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
		persistent []string
		want       []string // claim ref per element
		changed    bool
		warn       string
	}{
		{
			name:       "two interfaces on one NAD get two claims",
			annotation: `[{"name":"shared","namespace":"vms","interface":"` + hashed("blue") + `"},{"name":"shared","namespace":"vms","interface":"` + hashed("blue2") + `"},{"name":"red","namespace":"vms","interface":"` + hashed("red") + `"}]`,
			persistent: []string{"n", "n", ""},
			want:       []string{"vm1.blue", "vm1.blue2", ""},
			changed:    true,
		},
		{
			name:       "ordinal interface names",
			annotation: `[{"name":"shared","interface":"net1"},{"name":"shared","interface":"net2"}]`,
			persistent: []string{"n", "n"},
			want:       []string{"vm1.blue", "vm1.blue2"},
			changed:    true,
		},
		{
			name:       "no interface: position, as Multus names them",
			annotation: `[{"name":"shared"},{"name":"shared"},{"name":"red"}]`,
			persistent: []string{"", "n", "r"},
			want:       []string{"", "vm1.blue2", "vm1.red"},
			changed:    true,
		},
		{
			name:       "already set: unchanged",
			annotation: `[{"name":"shared","interface":"` + hashed("blue") + `","ipam-claim-reference":"vm1.blue"}]`,
			persistent: []string{"n"},
			want:       []string{"vm1.blue"},
		},
		{
			name:       "another claim already referenced: left, with a warning",
			annotation: `[{"name":"shared","interface":"` + hashed("blue") + `","ipam-claim-reference":"theirs"}]`,
			persistent: []string{"n"},
			want:       []string{"theirs"},
			warn:       `already references IPAMClaim "theirs"`,
		},
		{
			name:       "unknown interface: warning, no reference",
			annotation: `[{"name":"shared","interface":"eth7"}]`,
			persistent: []string{"n"},
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
			changed, warnings, err := addReferences(elems, "vm1", networks, tt.persistent, noClaims, nil, false)
			if err != nil {
				t.Fatal(err)
			}
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
	if _, _, err := addReferences(elems, "vm.x", networks, []string{"n"}, noClaims, nil, false); err != nil {
		t.Fatal(err)
	}
	if want := naming.Claim("vm.x", "Net_A"); elems[0].ClaimRef != want {
		t.Errorf("ref = %q, want %q", elems[0].ClaimRef, want)
	}
}

func noClaims(string) (string, bool, error) { return "", false, nil }

// Live NAD swap: the migration target's annotation names the new NAD with
// the same interface (KubeVirt names it after the logical network).
func TestAddReferencesAfterANADSwap(t *testing.T) {
	networks := []kubevirt.SecondaryNetwork{{Name: "blue", NetworkName: "nad-2", Ordinal: 1}}
	annotation := `[{"name":"nad-2","namespace":"vms","interface":"` + kubevirt.PodInterfaceName("blue") + `"}]`
	held := func(name string) (string, bool, error) {
		if name == "vm1.blue" {
			return "net-a", true, nil
		}
		return "", false, nil
	}
	for _, tt := range []struct {
		name, network, existingRef, want string
	}{
		{"NAD of the same network: the same claim", "net-a", "", "vm1.blue"},
		{"NAD of another network: that network's claim", "net-b", "", naming.SwappedClaim("vm1", "blue", "net-b")},
		{"ipkeeper's usual claim already referenced, NAD of another network: replaced", "net-b", "vm1.blue", naming.SwappedClaim("vm1", "blue", "net-b")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			elems, err := multus.ParseElements(annotation, "vms")
			if err != nil {
				t.Fatal(err)
			}
			if tt.existingRef != "" {
				elems[0].SetClaimRef(tt.existingRef)
			}
			if _, _, err := addReferences(elems, "vm1", networks, []string{tt.network}, held, nil, false); err != nil {
				t.Fatal(err)
			}
			if elems[0].ClaimRef != tt.want {
				t.Errorf("ref = %q, want %q", elems[0].ClaimRef, tt.want)
			}
		})
	}
}

// A running launcher's annotation rewritten from the VMI spec (a hotplug
// during a pending NAD swap) keeps its attached, claim-referencing
// elements as they were; new interfaces are left to addReferences.
func TestKeepAttached(t *testing.T) {
	blue, red := kubevirt.PodInterfaceName("blue"), kubevirt.PodInterfaceName("red")
	old := elementsOf(t, `[{"name":"blue-a","namespace":"vms","interface":"`+blue+`","ipam-claim-reference":"vm1.blue"},{"name":"plain","namespace":"vms","interface":"net9"}]`)
	elems := elementsOf(t, `[{"name":"blue-b","namespace":"vms","interface":"`+blue+`"},{"name":"plain2","namespace":"vms","interface":"net9"},{"name":"red","namespace":"vms","interface":"`+red+`"}]`)
	persistent := func(e multus.Element) bool { return strings.HasPrefix(e.Name, "blue") }
	if !keepAttached(elems, old, persistent) {
		t.Fatal("keepAttached changed nothing")
	}
	if e := elems[0]; e.Name != "blue-a" || e.ClaimRef != "vm1.blue" {
		t.Errorf("the attached blue element became %s (claim %q), want blue-a with vm1.blue", e.Name, e.ClaimRef)
	}
	if e := elems[1]; e.Name != "plain2" {
		t.Errorf("an element without a claim reference was restored to %s", e.Name)
	}
	if e := elems[2]; e.Name != "red" || e.ClaimRef != "" {
		t.Errorf("the hot-plugged element became %s (claim %q)", e.Name, e.ClaimRef)
	}
	if keepAttached(elems, old, persistent) {
		t.Error("keepAttached changed an annotation that already keeps its elements")
	}
}

// A launcher admitted while the webhook was not called has no reference
// (its ADD used the claim the webhook would have referenced); a hotplug
// during a pending NAD swap rewrites its annotation from the VMI spec. Its
// element on a network that keeps its addresses stays on its old NAD, so
// its claim stays referenced and is not released under the running VM (a
// chaos run saw it released); an element that only gains a reference, and
// one of a network that keeps nothing, are left as written.
func TestKeepAttachedWithoutReference(t *testing.T) {
	blue, green := kubevirt.PodInterfaceName("blue"), kubevirt.PodInterfaceName("green")
	old := elementsOf(t, `[{"name":"blue-b","namespace":"vms","interface":"`+blue+`"},{"name":"plain","namespace":"vms","interface":"net9"},{"name":"green","namespace":"vms","interface":"`+green+`"}]`)
	elems := elementsOf(t, `[{"name":"blue-a","namespace":"vms","interface":"`+blue+`"},{"name":"plain2","namespace":"vms","interface":"net9"},{"name":"green","namespace":"vms","interface":"`+green+`","ipam-claim-reference":"vm1.green"}]`)
	persistent := func(e multus.Element) bool { return e.Name != "plain" }
	if !keepAttached(elems, old, persistent) {
		t.Fatal("keepAttached changed nothing")
	}
	if e := elems[0]; e.Name != "blue-b" || e.ClaimRef != "" {
		t.Errorf("the attached blue element became %s (claim %q), want blue-b as it was", e.Name, e.ClaimRef)
	}
	if e := elems[1]; e.Name != "plain2" {
		t.Errorf("an element of a network that keeps nothing was restored to %s", e.Name)
	}
	if e := elems[2]; e.Name != "green" || e.ClaimRef != "vm1.green" {
		t.Errorf("an element that only gained a reference became %s (claim %q)", e.Name, e.ClaimRef)
	}
}

// With the PersistentIPs gate off (existingOnly) a launcher references the
// claims that exist, and no others: nobody would make them.
func TestAddReferencesExistingOnly(t *testing.T) {
	networks := []kubevirt.SecondaryNetwork{{Name: "blue", NetworkName: "blue", Ordinal: 1}, {Name: "red", NetworkName: "red", Ordinal: 2}}
	elems := elementsOf(t, `[{"name":"blue","interface":"`+kubevirt.PodInterfaceName("blue")+`"},{"name":"red","interface":"`+kubevirt.PodInterfaceName("red")+`"}]`)
	held := func(name string) (string, bool, error) {
		if name == "vm1.blue" {
			return "net-blue", true, nil
		}
		return "", false, nil
	}
	changed, _, err := addReferences(elems, "vm1", networks, []string{"net-blue", "net-red"}, held, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if !changed || elems[0].ClaimRef != "vm1.blue" || elems[1].ClaimRef != "" {
		t.Fatalf("changed %v, references %q %q; want vm1.blue and none", changed, elems[0].ClaimRef, elems[1].ClaimRef)
	}
}

// elementsOf parses a networks annotation of namespace vms.
func elementsOf(t *testing.T, annotation string) []multus.Element {
	t.Helper()
	elems, err := multus.ParseElements(annotation, "vms")
	if err != nil {
		t.Fatal(err)
	}
	return elems
}
