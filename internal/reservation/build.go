// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"net"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Block says whose address block a reserved address lies in, which the
// reservation's labels tell the agents that watch reservations.
type Block int

const (
	// NoBlock: no block of the writer's (borrowed, or a pool without
	// blocks). Labelled shared (naming.SharedNodeLabelValue), so every
	// agent sees it, the one whose block it lies in too, and skips it.
	NoBlock Block = iota
	// NodeBlock: a block of Params.Node. Labelled with the node, as only
	// that node's agent hands out, and watches, its block's addresses.
	NodeBlock
	// ClaimsBlock: a block of IPAMClaims (naming.ClaimsBlockLabel), whose
	// addresses no agent hands out or needs to watch.
	ClaimsBlock
)

// Params is what a reservation is made of.
type Params struct {
	// Pool is the IPPool (spec.pool); Key what its reservations are named
	// from (IPPool.LockKey).
	Pool, Key string
	// Network is spec.network: the CNI network (a Cluster API claim's is
	// its pool).
	Network string
	IP      netip.Addr
	Owner   ipkeeperv1alpha1.ReservationOwner
	// Interface is the pod interface (an IPAMClaim's spec.interface).
	Interface string
	// ContainerID, Node and AttachedAt are a pod attachment's: its
	// sandbox, the node it runs on and when it got the address.
	ContainerID, Node string
	AttachedAt        *metav1.Time
	// Block is whose block IP lies in.
	Block Block
	// MAC is the MAC a pod of a sticky_mac network presented, recorded in
	// the label macaddr.Label, which finds the address for that MAC again
	// once released (KeptForMAC); nil elsewhere.
	MAC net.HardwareAddr
}

// New builds the reservation p describes: the one place a reservation's
// name, labels and spec are put together.
func New(p Params) *ipkeeperv1alpha1.IPReservation {
	labels := naming.ReservationLabels(p.Network, string(p.Owner.Kind))
	switch p.Block {
	case NoBlock:
		labels[naming.NodeLabel] = naming.SharedNodeLabelValue
	case NodeBlock:
		labels[naming.NodeLabel] = naming.NodeLabelValue(p.Node)
	case ClaimsBlock:
		labels[naming.ClaimsBlockLabel] = "true"
	}
	if p.MAC != nil {
		labels[macaddr.Label] = macaddr.LabelValue(p.MAC)
	}
	return &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(p.Key, p.IP), Labels: labels},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: p.Pool, Network: p.Network, IP: p.IP.String(), Owner: p.Owner, InterfaceName: p.Interface,
			ContainerID: p.ContainerID, Node: p.Node, AttachedAt: p.AttachedAt,
		},
	}
}

// Claimant is an IPAMClaim that may get back what an earlier claim of
// its VM network held (KeptFor).
type Claimant struct {
	Owner ipkeeperv1alpha1.ReservationOwner
	// Aliases are the other names the same VM network's claim has
	// (naming.ClaimNames): a claim made anew after a live NAD swap gets
	// the other name.
	Aliases []string
	// Gone reports whether the IPAMClaim an owner names (namespace, name,
	// UID) no longer exists, read from the API server after the
	// reservation naming it; false when it cannot tell. A claim of one
	// of Aliases may well exist: the source of a live NAD swap, whose
	// launcher still runs. Nil: none is known gone.
	Gone func(ipkeeperv1alpha1.ReservationOwner) bool
}

// KeptFor reports whether r is kept back for c, a claim: r was the
// reservation of an earlier IPAMClaim of c's namespace and of c's name or
// one of its aliases, which has released it or is gone (the same VM's
// network, its claim made anew: the VM deleted and made again, restored
// from a snapshot or a backup). In a pool that retains addresses (a
// reuseCooldown, retained), r is kept for the claim name both while it
// cools down and before the garbage collector released it; without, only
// while it cools down (a pool's cooldown set since).
//
// A reservation not released is never kept while its claim exists: that
// claim holds and uses the address. One of c's own name and another UID
// is gone (a name has one claim at a time); one of an alias must be known
// gone (c.Gone), as the claims of the two names of one VM network live
// side by side during a live NAD swap, and in a pool two networks share
// the source's reservation is one the swapped claim would otherwise take.
// The new claim takes r back (claimalloc); nobody else gets it meanwhile.
func KeptFor(r *ipkeeperv1alpha1.IPReservation, c Claimant, retained bool) bool {
	o, owner := r.Spec.Owner, c.Owner
	if owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim || o.Kind != ipkeeperv1alpha1.OwnerIPAMClaim ||
		o.Namespace != owner.Namespace || o.UID == owner.UID {
		return false
	}
	sameName := o.Name == owner.Name
	if !sameName && !slices.Contains(c.Aliases, o.Name) {
		return false
	}
	switch {
	case r.Spec.Released():
		return true
	case !retained:
		return false
	case sameName:
		return true
	default:
		return c.Gone != nil && c.Gone(o)
	}
}

// KeptForMAC reports whether r is kept back for owner, a pod presenting
// mac on a sticky_mac network: r was released (cooling down, or over
// but not yet deleted) by a pod of owner's namespace, owner itself in an
// earlier sandbox or another, that presented the same MAC. The MAC is the
// workload's identity here, as the network's administrator chose, but
// only within a namespace: another tenant presenting it gets nothing.
func KeptForMAC(r *ipkeeperv1alpha1.IPReservation, owner ipkeeperv1alpha1.ReservationOwner, mac net.HardwareAddr) bool {
	o := r.Spec.Owner
	return r.Spec.Released() && mac != nil && r.Labels[macaddr.Label] == macaddr.LabelValue(mac) &&
		owner.Kind == ipkeeperv1alpha1.OwnerPod && o.Kind == ipkeeperv1alpha1.OwnerPod && o.Namespace == owner.Namespace
}

// ClaimMayUse reports whether the IPAMClaim with uid may use r's address:
// r is the claim's, or lent to it (lentTo: KubeVirt's decentralized live
// migration moves the owner claim's VM to the VM of this claim, whose
// launcher runs with the address beside the source's), and not released.
func ClaimMayUse(r *ipkeeperv1alpha1.IPReservation, uid types.UID) bool {
	if r.Spec.Released() || uid == "" {
		return false
	}
	if o := r.Spec.Owner; o.Kind == ipkeeperv1alpha1.OwnerIPAMClaim && o.UID == uid {
		return true
	}
	l := r.Spec.LentTo
	return l != nil && l.Kind == ipkeeperv1alpha1.OwnerIPAMClaim && l.UID == uid
}

// HeldBy reports whether r is owner's and in use (not released): the
// same object (kind and UID, so a re-created owner of the same name is
// another), and for a pod the same interface (ifName), as a pod holds one
// address per interface and family; a claim's is the claim's whatever
// its interface.
func HeldBy(r *ipkeeperv1alpha1.IPReservation, owner ipkeeperv1alpha1.ReservationOwner, ifName string) bool {
	o := r.Spec.Owner
	if o.Kind != owner.Kind || o.UID != owner.UID || r.Spec.Released() {
		return false
	}
	return owner.Kind != ipkeeperv1alpha1.OwnerPod || r.Spec.InterfaceName == ifName
}
