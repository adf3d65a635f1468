// SPDX-License-Identifier: Apache-2.0

// The claim name: which IPAMClaim holds a KubeVirt VM's addresses on one network.
//
// The name must be a valid object name (a DNS-1123 subdomain of at most 253
// characters) and no two (VM, network) pairs may ever share one, because the
// name is what the launcher pod's ipam-claim-reference points at: a shared
// name would hand one VM's addresses to another. The usual form is the one
// existing tools use, `<vm>.<network>`, but only where that concatenation is
// unambiguous; `vm.net` + `a` and `vm` + `net.a` would both give `vm.net.a`.

package naming

import (
	"crypto/sha256"
	"encoding/hex"
)

// Claim returns the claim name of owner (a VM or standalone VMI name) on the
// KubeVirt logical network (spec.networks[].name).
//
// Two forms, told apart by their number of dot-separated labels:
//
//	<owner>.<network>            2 labels: both parts are DNS labels
//	<owner>.<network>.<sha256>   3 labels: anything else (dots, underscores,
//	                             uppercase, too long); the first two labels are
//	                             readable, lossy hints and the hash of the exact
//	                             pair makes the name unique
//
// A 2-label name splits back into exactly one pair, and a 3-label name is
// decided by its hash, so distinct pairs get distinct names (up to a SHA-256
// collision; callers still check a claim's recorded owner and network).
func Claim(owner, network string) string {
	if isLabel(owner) && isLabel(network) {
		return owner + "." + network
	}
	// Object names cannot contain '/', so the hash input is unambiguous.
	sum := sha256.Sum256([]byte(owner + "/" + network))
	return hint(owner, 40, "vm") + "." + hint(network, 40, "net") + "." + hex.EncodeToString(sum[:16])
}
