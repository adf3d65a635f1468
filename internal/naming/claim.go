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
	"fmt"
	"regexp"
	"strings"
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

// SwappedClaim returns the claim name of owner's logical network when it
// uses CNI network `network` but Claim's name is held by a claim of another
// CNI network: a live NAD swap to another network, where the migration
// target needs addresses of the new network while the source still holds
// the old ones under Claim's name.
//
// Its four labels, <owner>.<logical>.<network>.<sha256>, tell it apart from
// both forms of Claim (two and three labels): the first three are readable,
// lossy hints and the hash of the exact, length-prefixed triple makes the
// name unique.
func SwappedClaim(owner, logical, network string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s%d:%s%d:%s", len(owner), owner, len(logical), logical, len(network), network))
	return hint(owner, 40, "vm") + "." + hint(logical, 40, "net") + "." + hint(network, 40, "cni") + "." + hex.EncodeToString(sum[:16])
}

// ClaimNames returns every name ipkeeper-controller gives the claim of
// owner's logical network on CNI network `network`: Claim's, and
// SwappedClaim's, which a live NAD swap used while Claim's name was held
// on the old network. A claim made anew under either takes back what the
// other held on that network (retention, cooldown): both are the same
// VM's network.
func ClaimNames(owner, logical, network string) []string {
	return []string{Claim(owner, logical), SwappedClaim(owner, logical, network)}
}

// ExtensionsClaim is the name KubeVirt's ipam-extensions gives the claim of
// owner's logical network (its claims.ComposeKey at v0.6.0): the pair
// joined by a dot, lowercased, cut into the runs of [a-z0-9] and '-' that
// start and end with [a-z0-9], those joined by dots, cut at 253 characters.
// It equals Claim's name when both parts are DNS labels; otherwise it is
// lossy ("a" + "b.c" and "a.b" + "c" share it), so a claim of this name is
// only ever used after checking its owner and network.
func ExtensionsClaim(owner, network string) string {
	s := strings.ToLower(owner + "." + network)
	name := strings.Join(extensionsRun.FindAllString(s, -1), ".")
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// extensionsRun is ipam-extensions' pattern as it matches: its
// `(\\.[a-z0-9]...)*` group needs a backslash, so each match is one run.
var extensionsRun = regexp.MustCompile(`[a-z0-9]([-a-z0-9]*[a-z0-9])?`)

// ClaimNetwork reads the claim of a name: its spec.network, and whether it
// exists. Callers read their cache.
type ClaimNetwork func(name string) (network string, exists bool, err error)

// ClaimFor is the one rule choosing the claim of owner's logical network
// on CNI network `network` (the NAD's config name); the claims controller
// creates that claim and the pod webhook makes the launcher reference it.
//
//  1. An existing claim for that network is kept: Claim's name, else
//     SwappedClaim's (the VM moved to this network earlier and holds its
//     addresses there). A claim with no spec.network (made by another
//     tool) counts as one for any network.
//  2. Otherwise Claim's name, unless a claim of another network holds it;
//     then SwappedClaim's.
//
// So one name never stands for two networks, a VM keeps the addresses of
// the network it uses across restarts and swaps back, and a VM that never
// changes networks keeps the `<vm>.<network>` name other tools expect.
//
// Before both, a claim of ExtensionsClaim's name (where it differs) that
// mine reports as this owner's and of this network is kept: ipam-extensions
// made it before ipkeeper took over, and the VM keeps its addresses.
func ClaimFor(owner, logical, network string, read, mine ClaimNetwork) (string, error) {
	plain, swapped := Claim(owner, logical), SwappedClaim(owner, logical, network)
	if ext := ExtensionsClaim(owner, logical); ext != plain && mine != nil {
		extNet, extExists, err := mine(ext)
		if err != nil {
			return "", err
		}
		if extExists && (extNet == network || extNet == "") {
			return ext, nil
		}
	}
	plainNet, plainExists, err := read(plain)
	if err != nil {
		return "", err
	}
	if !plainExists || plainNet == network || plainNet == "" {
		if plainExists {
			return plain, nil
		}
		// Free, unless the VM moved here earlier and kept the swapped name.
		swappedNet, swappedExists, err := read(swapped)
		if err != nil {
			return "", err
		}
		if swappedExists && (swappedNet == network || swappedNet == "") {
			return swapped, nil
		}
		return plain, nil
	}
	return swapped, nil
}
