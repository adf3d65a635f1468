// SPDX-License-Identifier: Apache-2.0

// The pool name: which IPPool holds a network's addresses.

package naming

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"
)

// InlinePool returns the name of the IPPool that is the definition of a
// network whose NADs carry their ranges inline: the network name itself
// when it is a valid object name (so reservations made before pools
// existed, named from the network, keep their names), else a readable
// hint plus a hash of the exact name.
func InlinePool(network string) string {
	if len(validation.IsDNS1123Subdomain(network)) == 0 {
		return network
	}
	sum := sha256.Sum256([]byte(network))
	return hint(network, 40, "net") + "." + hex.EncodeToString(sum[:16])
}

// PoolOf returns the pool of a reservation from its spec.pool and
// spec.network: the pool when set, else (a reservation made before pools
// existed) the inline pool of its network.
func PoolOf(pool, network string) string {
	if pool != "" {
		return pool
	}
	return InlinePool(network)
}
