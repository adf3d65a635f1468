// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

func TestDesiredClaims(t *testing.T) {
	nads := map[string]multus.Network{
		"vms/blue":   {Name: "tenant-blue", AllowPersistentIPs: true},
		"other/blue": {Name: "other-blue", AllowPersistentIPs: true},
		"vms/plain":  {Name: "plain"},
		"vms/nested": {Name: "nested", IgnoredFlags: "spec.config.plugins[0].allowPersistentIPs"},
	}
	read := func(_ context.Context, key types.NamespacedName) (multus.Network, error) {
		if key.Name == "broken" {
			return multus.Network{}, &multus.NADError{NAD: key, Field: "spec.config.name", Problem: "missing"}
		}
		n, ok := nads[key.String()]
		if !ok {
			return multus.Network{}, errors.New("NetworkAttachmentDefinition " + key.String() + " not found")
		}
		return n, nil
	}
	networks := []kubevirt.SecondaryNetwork{
		{Name: "a", NetworkName: "blue", Ordinal: 1},
		{Name: "b", NetworkName: "other/blue", Ordinal: 2, MAC: "02:00:00:00:AA:0B"},
		{Name: "p", NetworkName: "plain", Ordinal: 3},
		{Name: "gone", NetworkName: "blue", Absent: true, Ordinal: 4},
		{Name: "x", NetworkName: "broken", Ordinal: 5},
		{Name: "m", NetworkName: "missing", Ordinal: 6},
		{Name: "bad", NetworkName: "Bad/Ref", Ordinal: 7},
		{Name: "n", NetworkName: "nested", Ordinal: 8},
	}
	noClaims := func(string) (string, bool, error) { return "", false, nil }
	want, problems, err := desiredClaims(context.Background(), "vm1", "vms", networks, read, noClaims, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 2 {
		t.Fatalf("want = %+v, expected claims for a and b only", want)
	}
	if want[0] != (Desired{Name: "vm1.a", LogicalNetwork: "a", Network: "tenant-blue", Interface: kubevirt.PodInterfaceName("a"), NAD: types.NamespacedName{Namespace: "vms", Name: "blue"}}) {
		t.Errorf("want[0] = %+v", want[0])
	}
	if want[1].Network != "other-blue" || want[1].NAD.Namespace != "other" || want[1].OwnMAC != "02:00:00:00:aa:0b" {
		t.Errorf("want[1] = %+v", want[1])
	}
	joined := ""
	for _, p := range problems {
		joined += p.Error() + "\n"
	}
	for _, part := range []string{`network "x": NetworkAttachmentDefinition vms/broken: spec.config.name`, `network "m": NetworkAttachmentDefinition vms/missing not found`, `network "bad"`,
		`network "n": NetworkAttachmentDefinition vms/nested: "allowPersistentIPs" is set at spec.config.plugins[0].allowPersistentIPs, where it is ignored; set it at the top level`} {
		if !strings.Contains(joined, part) {
			t.Errorf("problems %q lack %q", joined, part)
		}
	}
}

// A swapped network's claim: the VM's logical network "a" held
// vm1.a on CNI network tenant-blue, then moved to a NAD of another network.
func TestDesiredClaimsAfterASwapToAnotherNetwork(t *testing.T) {
	nads := map[string]multus.Network{
		"vms/blue":   {Name: "tenant-blue", AllowPersistentIPs: true},
		"vms/blue-2": {Name: "tenant-blue", AllowPersistentIPs: true},
		"vms/green":  {Name: "tenant-green", AllowPersistentIPs: true},
	}
	read := func(_ context.Context, key types.NamespacedName) (multus.Network, error) {
		return nads[key.String()], nil
	}
	held := func(name string) (string, bool, error) {
		if name == "vm1.a" {
			return "tenant-blue", true, nil
		}
		return "", false, nil
	}
	for _, tt := range []struct{ nad, want string }{
		{"blue", "vm1.a"},
		{"blue-2", "vm1.a"}, // same CNI network: the same claim, the same addresses
		{"green", naming.SwappedClaim("vm1", "a", "tenant-green")},
	} {
		want, _, err := desiredClaims(context.Background(), "vm1", "vms", []kubevirt.SecondaryNetwork{{Name: "a", NetworkName: tt.nad, Ordinal: 1}}, read, held, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) != 1 || want[0].Name != tt.want || want[0].Network != nads["vms/"+tt.nad].Name {
			t.Errorf("NAD %s: want = %+v, expected claim %s on network %s", tt.nad, want, tt.want, nads["vms/"+tt.nad].Name)
		}
	}
}

func TestClaimWanted(t *testing.T) {
	networks := []kubevirt.SecondaryNetwork{{Name: "a", NetworkName: "blue"}, {Name: "gone", NetworkName: "blue", Absent: true}, {Name: "m", NetworkName: "missing"}}
	networkOf := func(nad string) (string, bool) {
		switch nad {
		case "blue":
			return "tenant-green", true // the NAD "a" now names belongs to tenant-green
		}
		return "", false
	}
	claim := func(name, logical, network string) *ipamclaimsv1alpha1.IPAMClaim {
		c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network}}
		if logical != "" {
			c.Annotations = map[string]string{NetworkAnnotation: logical}
		}
		return c
	}
	for _, tt := range []struct {
		name  string
		claim *ipamclaimsv1alpha1.IPAMClaim
		want  bool
	}{
		{"the network's NAD is of the claim's network", claim(naming.SwappedClaim("vm1", "a", "tenant-green"), "a", "tenant-green"), true},
		{"swapped away: the NAD is of another network", claim("vm1.a", "a", "tenant-blue"), false},
		{"unplugged", claim("vm1.gone", "gone", "tenant-green"), false},
		{"removed from the spec", claim("vm1.b", "b", "tenant-green"), false},
		{"another tool's claim (no annotation, no network) matched by name", claim("vm1.a", "", ""), true},
		{"another tool's claim of another name", claim("vm1.x", "", ""), false},
		{"NAD unreadable: kept, never released on doubt", claim("vm1.m", "m", "tenant-blue"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := claimWanted(networks, "vm1", tt.claim, networkOf); got != tt.want {
				t.Errorf("claimWanted(%s, network %q) = %v, want %v", tt.claim.Name, tt.claim.Spec.Network, got, tt.want)
			}
		})
	}
}
