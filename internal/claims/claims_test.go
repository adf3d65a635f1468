// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
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
		{Name: "b", NetworkName: "other/blue", Ordinal: 2},
		{Name: "p", NetworkName: "plain", Ordinal: 3},
		{Name: "gone", NetworkName: "blue", Absent: true, Ordinal: 4},
		{Name: "x", NetworkName: "broken", Ordinal: 5},
		{Name: "m", NetworkName: "missing", Ordinal: 6},
		{Name: "bad", NetworkName: "Bad/Ref", Ordinal: 7},
		{Name: "n", NetworkName: "nested", Ordinal: 8},
	}
	want, problems := desiredClaims(context.Background(), "vm1", "vms", networks, read)
	if len(want) != 2 {
		t.Fatalf("want = %+v, expected claims for a and b only", want)
	}
	if want[0] != (Desired{Name: "vm1.a", LogicalNetwork: "a", Network: "tenant-blue", Interface: kubevirt.PodInterfaceName("a"), NAD: types.NamespacedName{Namespace: "vms", Name: "blue"}}) {
		t.Errorf("want[0] = %+v", want[0])
	}
	if want[1].Network != "other-blue" || want[1].NAD.Namespace != "other" {
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

func TestNetworkStillWanted(t *testing.T) {
	networks := []kubevirt.SecondaryNetwork{{Name: "a"}, {Name: "gone", Absent: true}}
	if !networkStillWanted(networks, "vm1", "vm1.a", "a") {
		t.Error("a is wanted")
	}
	if networkStillWanted(networks, "vm1", "vm1.gone", "gone") {
		t.Error("an unplugged network is not wanted")
	}
	if networkStillWanted(networks, "vm1", "vm1.b", "b") {
		t.Error("a removed network is not wanted")
	}
	if !networkStillWanted(networks, "vm1", "vm1.a", "") {
		t.Error("a claim made by another tool (no annotation) is matched by name")
	}
}
