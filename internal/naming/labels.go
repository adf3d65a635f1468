// SPDX-License-Identifier: Apache-2.0

package naming

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// NetworkLabel carries the network of a reservation so a network's
	// reservations can be listed with a label selector.
	NetworkLabel = "ipkeeper.io/network"
	// OwnerKindLabel carries the owner kind (Pod or IPAMClaim).
	OwnerKindLabel = "ipkeeper.io/owner-kind"
	// NodeLabel says which agents watch a reservation. A pod reservation
	// an agent made in one of its node's IPBlocks carries the node's value
	// (NodeLabelValue): only that node's agent watches it. One in no
	// holder's block (a borrowed address, a static one, another writer's)
	// carries SharedNodeLabelValue: every agent watches it. A claim's in a
	// block of IPAMClaims carries ClaimsBlockLabel instead: no agent does.
	// So an agent holds one watch of reservations (AgentReservationSelector).
	NodeLabel = "ipkeeper.io/node"
	// SharedNodeLabelValue is NodeLabel's value on reservations every
	// agent watches. No node's value is it: node names are lowercase.
	SharedNodeLabelValue = "Shared"
	// ClaimsBlockLabel marks a reservation ipkeeper-controller made for a
	// claim (an IPAMClaim or a Cluster API IPAddressClaim) in one of its
	// blocks of holder IPAMClaims: no agent hands out those addresses, so
	// no agent watches it.
	ClaimsBlockLabel = "ipkeeper.io/claims-block"
	// PoolLabel carries the pool of an IPBlock, so a pool's blocks can be
	// listed (and deleted with the pool) by label.
	PoolLabel = "ipkeeper.io/pool"
)

// ReservationLabels returns the labels of a reservation of network held
// by an owner of ownerKind: every writer (agent, claims controller, Cluster
// API provider, import) labels reservations with these.
func ReservationLabels(network, ownerKind string) map[string]string {
	return map[string]string{NetworkLabel: NetworkLabelValue(network), OwnerKindLabel: ownerKind}
}

// NetworkLabelValue returns the value of NetworkLabel for a network: the name
// itself when it is a valid label value, else a hash of it. A network literally
// named like such a hash would share the value, so readers that select by this
// label must still check spec.network; the label narrows, the spec decides.
func NetworkLabelValue(network string) string { return labelValue(network) }

// PoolLabelValue returns the value of PoolLabel for a pool.
func PoolLabelValue(pool string) string { return labelValue(pool) }

// NodeLabelValue returns the value of NodeLabel for a node: its name, or a
// hash of a name too long for a label value.
func NodeLabelValue(node string) string { return labelValue(node) }

// AgentReservationSelector is the label selector of the reservations the
// agent of node watches: its node's and the shared ones, in one watch.
// The API server offers every reservation event to every reservation
// watch (a custom resource's watchers are not indexed), so each watch
// an agent holds costs every allocation in the cluster.
func AgentReservationSelector(node string) string {
	return NodeLabel + " in (" + NodeLabelValue(node) + "," + SharedNodeLabelValue + ")"
}

func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:28])
}
