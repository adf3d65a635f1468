// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"net"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// Desired is one claim an owner should have.
type Desired struct {
	// Name is the claim name, naming.ClaimFor(owner, LogicalNetwork, Network).
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
	// Retention is how long the claim's addresses are kept once it is
	// released (claimstatus.RetentionAnnotation, capped); 0 for none.
	Retention time.Duration
	// OwnMAC is the MAC the owner's interface sets itself (KubeVirt's
	// macAddress), normalized; "" for none (macaddr.OwnAnnotation).
	OwnMAC string
	// Receiver: the owner is a VM waiting to receive a decentralized live
	// migration; a claim made for it waits for the source's addresses
	// (claimstatus.ReceiverAnnotation, package handover).
	Receiver bool
}

// NADReader reads and parses a NetworkAttachmentDefinition.
type NADReader func(ctx context.Context, key types.NamespacedName) (multus.Network, error)

// desiredClaims lists the claims owner needs in namespace for its secondary
// networks: one per network that is not being unplugged and whose NAD
// allows persistent IPs (multus.ParseNAD's AllowPersistentIPs: the one
// rule), named by naming.ClaimFor from the claims that exist (claimNet).
// A network whose NAD cannot be read or parsed is reported in problems and
// skipped, so one broken NAD does not hold back the VM's other networks.
func desiredClaims(ctx context.Context, owner, namespace string, networks []kubevirt.SecondaryNetwork, read NADReader, claimNet, mine naming.ClaimNetwork) (want []Desired, problems []error, _ error) {
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
		name, err := naming.ClaimFor(owner, n.Name, net.Name, claimNet, mine)
		if err != nil {
			return nil, nil, fmt.Errorf("choosing the IPAMClaim of network %q: %w", n.Name, err)
		}
		want = append(want, Desired{
			Name:           name,
			LogicalNetwork: n.Name,
			Network:        net.Name,
			Interface:      kubevirt.PodInterfaceName(n.Name),
			NAD:            key,
			OwnMAC:         ownMAC(n.MAC),
		})
	}
	return want, problems, nil
}

// claimWanted reports whether the owner's spec (its secondary networks)
// still wants claim: its logical network is there, not being unplugged,
// and names a NAD of the claim's CNI network (spec.network). After a live
// NAD swap to another network the old network's claim is no longer wanted;
// it is released once no live launcher pod uses it (users). networkOf
// reads a NAD's CNI network; one it cannot tell (NAD missing or broken)
// keeps the claim, since releasing takes the VM's addresses. Policy (gate,
// NAD flag) is deliberately not consulted: turning it off keeps existing
// claims.
func claimWanted(networks []kubevirt.SecondaryNetwork, owner string, claim *ipamclaimsv1alpha1.IPAMClaim, networkOf func(multusNetworkName string) (network string, known bool)) bool {
	logical := claim.Annotations[NetworkAnnotation]
	for _, n := range networks {
		if n.Absent {
			continue
		}
		// Claims of other tools carry no annotation: matched by the name,
		// ipkeeper's or ipam-extensions'.
		if n.Name != logical && (logical != "" || (naming.Claim(owner, n.Name) != claim.Name && naming.ExtensionsClaim(owner, n.Name) != claim.Name)) {
			continue
		}
		if claim.Spec.Network == "" {
			return true
		}
		if network, known := networkOf(n.NetworkName); !known || network == claim.Spec.Network {
			return true
		}
	}
	return false
}

// ownMAC normalizes an interface's own macAddress; one KubeVirt would
// refuse is none.
func ownMAC(v string) string {
	mac, err := net.ParseMAC(v)
	if err != nil || len(mac) != 6 {
		return ""
	}
	return mac.String()
}
