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
func NetworkLabelValue(network string) string {
	if len(validation.IsValidLabelValue(network)) == 0 {
		return network
	}
	sum := sha256.Sum256([]byte(network))
	return "sha256-" + hex.EncodeToString(sum[:28])
}
