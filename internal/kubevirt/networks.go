// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"crypto/sha256"
	"encoding/hex"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// SecondaryNetwork is a Multus secondary (non-default) network of a VM or VMI.
type SecondaryNetwork struct {
	// Name is the logical network name (spec.networks[].name).
	Name string
	// NetworkName is multus.networkName: "nad" or "namespace/nad".
	NetworkName string
	// Absent is true when the network's interface is being hot-unplugged
	// (state: absent).
	Absent bool
	// Ordinal is the position among the secondary networks, from 1, which is
	// what KubeVirt's older ordinal scheme names the pod interface (net1 ...).
	Ordinal int
	// MAC is the interface's own macAddress ("" for none), which KubeVirt
	// passes to Multus as the networks annotation element's mac.
	MAC string
}

// SecondaryNetworks lists the Multus non-default networks of a VMI spec, in
// order, the ones KubeVirt attaches through Multus as extra pod interfaces.
func SecondaryNetworks(spec *kubevirtv1.VirtualMachineInstanceSpec) []SecondaryNetwork {
	if spec == nil {
		return nil
	}
	absent, macs := map[string]bool{}, map[string]string{}
	for _, iface := range spec.Domain.Devices.Interfaces {
		if iface.State == kubevirtv1.InterfaceStateAbsent {
			absent[iface.Name] = true
		}
		macs[iface.Name] = iface.MacAddress
	}
	var out []SecondaryNetwork
	for _, n := range spec.Networks {
		if n.Multus == nil || n.Multus.Default {
			continue
		}
		out = append(out, SecondaryNetwork{Name: n.Name, NetworkName: n.Multus.NetworkName, Absent: absent[n.Name], Ordinal: len(out) + 1, MAC: macs[n.Name]})
	}
	return out
}

// PodInterfaceName is the pod interface KubeVirt creates for a secondary
// network: "pod" and the first 11 hex digits of the SHA-256 of the logical
// network name (11 so that KubeVirt's "<hash>-nic" helper interface fits
// in IFNAMSIZ).
func PodInterfaceName(network string) string {
	sum := sha256.Sum256([]byte(network))
	return "pod" + hex.EncodeToString(sum[:])[:11]
}

// OrdinalInterfaceName is the pod interface name of KubeVirt's older scheme,
// still used by launcher pods of VMIs started before the hashed scheme: the
// name Multus gives its delegates (secondary network N is delegate N).
func OrdinalInterfaceName(ordinal int) string { return multus.DelegateIfName(ordinal) }

// LogicalNetwork finds the VMI network a launcher pod's interface
// attaches: by the pod interface name KubeVirt gave it (hashed, or the
// older ordinal net<N>), else, for an element without an interface name,
// by its position (index, from 0) among the secondary networks, the way
// the ordinal scheme names interfaces.
func LogicalNetwork(iface string, index int, networks []SecondaryNetwork) (string, bool) {
	if iface != "" {
		for _, n := range networks {
			if PodInterfaceName(n.Name) == iface || OrdinalInterfaceName(n.Ordinal) == iface {
				return n.Name, true
			}
		}
		return "", false
	}
	for _, n := range networks {
		if n.Ordinal == index+1 {
			return n.Name, true
		}
	}
	return "", false
}
