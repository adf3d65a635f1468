// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// addReferences sets ipam-claim-reference on every element that has a
// network in cniNetworks (the CNI network of the element's NAD, "" for a
// NAD that does not allow persistent IPs): the claim naming.ClaimFor
// chooses for the VMI's logical network on that CNI network, so the pod
// always references a claim of the network its NAD attaches (a migration
// target after a live NAD swap to another network gets the new network's
// claim, while the source keeps the old one). It returns whether anything
// changed and warnings for elements it could not place or that already
// reference another tool's claim (left as they are: another controller may
// own them). With existingOnly (nobody makes claims, or another
// controller does) only references to claims the VMI's owner holds
// (mine) are added.
func addReferences(elems []multus.Element, vmiName string, networks []kubevirt.SecondaryNetwork, cniNetworks []string, claimNet, mine naming.ClaimNetwork, existingOnly bool) (changed bool, warnings []string, _ error) {
	for i := range elems {
		if cniNetworks[i] == "" {
			continue
		}
		logical, ok := kubevirt.LogicalNetwork(elems[i].Interface, i, networks)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("network %s/%s (interface %q) matches no network of VirtualMachineInstance %s; it gets no persistent IPs",
				elems[i].Namespace, elems[i].Name, elems[i].Interface, vmiName))
			continue
		}
		want, err := naming.ClaimFor(vmiName, logical, cniNetworks[i], claimNet, mine)
		if err != nil {
			return false, nil, fmt.Errorf("choosing the IPAMClaim of network %q: %w", logical, err)
		}
		if existingOnly && elems[i].ClaimRef != want {
			held := mine
			if held == nil {
				held = claimNet
			}
			if _, exists, err := held(want); err != nil {
				return false, nil, fmt.Errorf("reading the IPAMClaim of network %q: %w", logical, err)
			} else if !exists {
				continue
			}
		}
		switch elems[i].ClaimRef {
		case want:
		case "", naming.Claim(vmiName, logical):
			// Unset, or ipkeeper's usual claim while the NAD now attaches
			// another CNI network: never a claim of another network.
			elems[i].SetClaimRef(want)
			changed = true
		default:
			warnings = append(warnings, fmt.Sprintf("network %q already references IPAMClaim %q; ipkeeper's claim would be %q; leaving it", logical, elems[i].ClaimRef, want))
		}
	}
	return changed, warnings, nil
}

// keepAttached restores, in a running launcher's rewritten networks
// annotation (elems), every element of the old annotation (old) whose
// interface is still there and that carries a claim reference, or that
// was admitted without one on a NAD that allows persistent IPs
// (persistent): that interface is attached, to the network of its old
// NAD, with its claim's addresses, and an annotation edit does not move
// it. virt-controller rewrites the whole annotation from the VMI spec on a
// NIC hotplug or unplug; during a live NAD swap that spec names the new
// NAD, and taking it would point the source at the new network's claim,
// leave the old claim unreferenced and released, and free the address the
// running VM still uses. A launcher admitted while this webhook was not
// called has no reference (its ADD used the claim the webhook would have
// referenced): its element is kept when its NAD changes, and addReferences
// then references its network's claim. Only added and removed interfaces
// take effect; the swap reaches the VM through its migration target. It
// reports whether it changed anything.
func keepAttached(elems, old []multus.Element, persistent func(multus.Element) bool) bool {
	attached := make(map[string]multus.Element, len(old))
	for _, e := range old {
		if e.Interface != "" {
			attached[e.Interface] = e
		}
	}
	changed := false
	for i, e := range elems {
		o, ok := attached[e.Interface]
		if !ok {
			continue
		}
		sameNAD := e.Name == o.Name && e.Namespace == o.Namespace
		switch {
		case o.ClaimRef != "" && sameNAD && e.ClaimRef == o.ClaimRef:
			continue
		case o.ClaimRef == "" && (sameNAD || !persistent(o)):
			// Without a reference only a move to another NAD is undone,
			// and only for a network that keeps its addresses.
			continue
		}
		elems[i] = o
		changed = true
	}
	return changed
}
