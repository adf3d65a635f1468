// SPDX-License-Identifier: Apache-2.0

package claimstatus

// The parts of an IPAMClaim's status ipkeeper writes that are fields
// rather than conditions.
const (
	PartIPs      = "status.ips"
	PartOwnerPod = "status.ownerPod"
)

// Parts names, for each part of an IPAMClaim's status ipkeeper writes (a
// field, or a condition by its type), the package that writes it: one
// each, but for the import of whereabouts' allocations, which records an
// imported address on a claim not filled yet. Every status write goes
// through Write; hack/writercheck fails when another package sets a part
// (assigns the field, builds or removes the condition, or calls this
// package's constructor of it), and when docs/development.md's writer
// table does not name the writer in the part's row.
var Parts = map[string][]string{
	PartIPs:                 {"internal/controller/claimaddrs", "internal/cli"},
	PartOwnerPod:            {"internal/controller/claimaddrs", "internal/cli"},
	ConditionIPsAllocated:   {"internal/controller/claimaddrs", "internal/cli"},
	ConditionHeld:           {"internal/controller/claimaddrs"},
	ConditionRequested:      {"internal/controller/claimaddrs"},
	ConditionInPool:         {"internal/controller/poolstatus"},
	ConditionGuestAddresses: {"internal/kubevirt/guestnet"},
}

// Constructors are this package's functions that build a part for its
// writer to set: calling one is writing that part.
var Constructors = map[string]string{
	"Record":       PartIPs,
	"Allocated":    ConditionIPsAllocated,
	"NotAllocated": ConditionIPsAllocated,
	"InPool":       ConditionInPool,
}
