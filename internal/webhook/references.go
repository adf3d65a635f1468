// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// logicalNetwork finds the VMI network an element of the launcher pod's
// networks annotation attaches: by the pod interface name KubeVirt gave it
// (hashed, or the older ordinal net<N>), else by position, the way the
// ordinal scheme names interfaces.
func logicalNetwork(elems []multus.Element, i int, networks []kubevirt.SecondaryNetwork) (string, bool) {
	e := elems[i]
	if e.Interface != "" {
		for _, n := range networks {
			if kubevirt.PodInterfaceName(n.Name) == e.Interface || kubevirt.OrdinalInterfaceName(n.Ordinal) == e.Interface {
				return n.Name, true
			}
		}
		return "", false
	}
	for _, n := range networks {
		if n.Ordinal == i+1 {
			return n.Name, true
		}
	}
	return "", false
}

// addReferences sets ipam-claim-reference on every element persistent
// reports true for. It returns whether anything changed and warnings for
// elements it could not place or that already reference another claim
// (left as they are: another controller may own them).
func addReferences(elems []multus.Element, vmiName string, networks []kubevirt.SecondaryNetwork, persistent []bool) (changed bool, warnings []string) {
	for i := range elems {
		if !persistent[i] {
			continue
		}
		logical, ok := logicalNetwork(elems, i, networks)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("network %s/%s (interface %q) matches no network of VirtualMachineInstance %s; it gets no persistent IPs",
				elems[i].Namespace, elems[i].Name, elems[i].Interface, vmiName))
			continue
		}
		want := naming.Claim(vmiName, logical)
		switch elems[i].ClaimRef {
		case want:
		case "":
			elems[i].SetClaimRef(want)
			changed = true
		default:
			warnings = append(warnings, fmt.Sprintf("network %q already references IPAMClaim %q; ipkeeper's claim would be %q; leaving it", logical, elems[i].ClaimRef, want))
		}
	}
	return changed, warnings
}
