// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// Desired is one claim an owner should have.
type Desired struct {
	// Name is the claim name, naming.Claim(owner, LogicalNetwork).
	Name string
	// LogicalNetwork is the KubeVirt network name (spec.networks[].name).
	LogicalNetwork string
	// Network is the NAD's CNI network name: the claim's spec.network.
	Network string
	// Interface is the pod interface KubeVirt gives the network: spec.interface.
	Interface string
	// NAD is the attachment the network uses.
	NAD types.NamespacedName
	// Request is the owner's requested addresses on the network
	// (RequestedAddressesAnnotation); nil when it asks for none.
	Request *request
}

// NADReader reads and parses a NetworkAttachmentDefinition.
type NADReader func(ctx context.Context, key types.NamespacedName) (multus.Network, error)

// desiredClaims lists the claims owner needs in namespace for its secondary
// networks: one per network that is not being unplugged and whose NAD
// allows persistent IPs (multus.ParseNAD's AllowPersistentIPs: the one
// rule). A network whose NAD cannot be read or parsed is reported in
// problems and skipped, so one broken NAD does not hold back the VM's other
// networks.
func desiredClaims(ctx context.Context, owner, namespace string, networks []kubevirt.SecondaryNetwork, read NADReader) (want []Desired, problems []error) {
	for _, n := range networks {
		if n.Absent {
			continue
		}
		key, err := multus.NADRef(n.NetworkName, namespace)
		if err != nil {
			problems = append(problems, fmt.Errorf("network %q: %w", n.Name, err))
			continue
		}
		net, err := read(ctx, key)
		if err != nil {
			problems = append(problems, fmt.Errorf("network %q: %w", n.Name, err))
			continue
		}
		if !net.AllowPersistentIPs {
			if p := net.FlagProblem(); p != "" {
				// Set where nothing reads it: say so rather than let the
				// VM silently get addresses that do not persist.
				problems = append(problems, fmt.Errorf("network %q: NetworkAttachmentDefinition %s: %s", n.Name, key, p))
			}
			continue
		}
		want = append(want, Desired{
			Name:           naming.Claim(owner, n.Name),
			LogicalNetwork: n.Name,
			Network:        net.Name,
			Interface:      kubevirt.PodInterfaceName(n.Name),
			NAD:            key,
		})
	}
	return want, problems
}

// networkStillWanted reports whether the owner's spec still has the logical
// network, not being unplugged. Policy (gate, NAD flag) is deliberately not
// consulted: turning it off keeps existing claims.
func networkStillWanted(networks []kubevirt.SecondaryNetwork, owner, claimName, logical string) bool {
	for _, n := range networks {
		if n.Absent {
			continue
		}
		if n.Name == logical || (logical == "" && naming.Claim(owner, n.Name) == claimName) {
			return true
		}
	}
	return false
}
