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
// when it is a valid object name, else a readable hint plus a hash of the
// exact name.
func InlinePool(network string) string {
	if len(validation.IsDNS1123Subdomain(network)) == 0 {
		return network
	}
	sum := sha256.Sum256([]byte(network))
	return hint(network, 40, "net") + "." + hex.EncodeToString(sum[:16])
}
