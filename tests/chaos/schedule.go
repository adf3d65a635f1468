// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"math/rand/v2"
	"time"
)

// opKind is a scheduled operation.
type opKind int

const (
	opAdd          opKind = iota // ADD of the slot's sandbox (a new pod when it has none; repeated when live)
	opNewSandbox                 // a new sandbox of the slot's pod, sometimes with the old one's DEL racing it
	opDel                        // DEL of the slot's current sandbox
	opStaleDel                   // a late DEL of an earlier sandbox of the slot's pod
	opCheck                      // CHECK of the slot's current sandbox
	opGC                         // CNI GC on one node and network with the runtime's valid attachments (flag: a list that predates the last 10 s)
	opPodDelete                  // the pod is deleted, after a DEL or with the DEL lost
	opClaimStart                 // claim-backed pods start (one, or two on two nodes at once)
	opClaimMigrate               // a second pod of the claim on another node, then the first goes
	opClaimRestart               // the claim's pods go and a new one starts: same addresses
	opClaimDelete                // the claim's pods go, the claim is deleted and made again (sometimes asking for given addresses)
	opClaimEdit                  // an administrator moves a filled claim's status.ips to free addresses (its pods stopped first)
	opPoolEdit                   // the shared pool grows by a range or loses it, its gateway or an exclude moves, its namespace grant is revoked or given, while addresses there are held
	opBadNAD                     // a NAD ipkeeper must refuse (overlapping another network, disagreeing with its network's pool, naming a missing pool) is made, a pod's ADD on it tried, both deleted
	opNodeDelete                 // a node dies: its agent is killed, its pods deleted without DELs, its Node object deleted and made again, its agent started
	opClaimStorm                 // every claim without pods starts at once while the controller is killed and restarted
	opCAPIClaim                  // a Cluster API IPAddressClaim of the shared pool is made (and its address checked), or deleted
	numOpKinds
)

var opNames = [...]string{"add", "new-sandbox", "del", "stale-del", "check", "gc", "pod-delete",
	"claim-start", "claim-migrate", "claim-restart", "claim-delete", "claim-edit", "pool-edit",
	"bad-nad", "node-delete", "claim-storm", "capi-claim"}

func (k opKind) String() string { return opNames[k] }

// opWeights give the mix.
var opWeights = [numOpKinds]int{
	opAdd: 30, opNewSandbox: 10, opDel: 12, opStaleDel: 6, opCheck: 8, opGC: 3, opPodDelete: 8,
	opClaimStart: 8, opClaimMigrate: 6, opClaimRestart: 4, opClaimDelete: 4, opClaimEdit: 2, opPoolEdit: 2,
	opBadNAD: 1, opCAPIClaim: 2,
	// Scheduled by count instead (rareEvery): each stops a third of the
	// slots, or every claim, for seconds.
	opNodeDelete: 0, opClaimStorm: 0,
}

// Slot pools. Ordinary pods on a /24, static-IP pods on the same
// network, pods of two networks sharing a /28 pool (more slots than
// addresses; even slots on one network, odd on the other), claim slots,
// and pods without a claim on the claims' network (the agents' blocks and
// the controller's blocks of IPAMClaims share its pool).
const (
	poolPods   = "pods"
	poolOdd    = "odd"
	poolStatic = "static"
	poolSmall  = "small"
	poolVM     = "vm"
	poolVMPods = "vmpods"
	// poolSticky: pods of the sticky_mac network, each slot presenting
	// the MAC of its pair (stickyMAC), on another node than its pair's.
	poolSticky = "sticky"
)

var poolSizes = map[string]int{poolPods: 36, poolStatic: 8, poolOdd: 8, poolSmall: 20, poolVM: 10, poolVMPods: 6, poolSticky: 6}

// step is one scheduled operation. The schedule is a pure function of
// the seed: which operation, on which slot, with which variations; what
// it does depends on the slot's state when it runs.
type step struct {
	seq  int
	kind opKind
	pool string
	slot int
	node int    // for GC, and the node a claim pod starts on
	flag bool   // a variation: racing stale DEL, DEL before pod deletion, two first pods of a claim, a pod right after a claim edit
	pick uint64 // further choices (which old sandbox, which addresses a claim asks for or is moved to ...)
	// drop: a claim delete that does not make the claim again (the claim
	// storm makes it while the controller is down); never drawn.
	drop bool
}

// Variations of the claim operations, drawn from bits of step.pick (the
// low bits choose the pod or the node).
const (
	// requestNone .. requestTaken: what a re-created claim asks for
	// (requestShift selects the bits): nothing (half the time), free
	// addresses of the range, or an address someone holds (refused:
	// RequestedAddresses=False, Taken, until its holder lets it go), a
	// quarter each.
	requestShift = 8
	requestNone  = 0
	requestFree  = 4
	requestTaken = 6
	// familyShift selects which families a request or an edit covers:
	// both, IPv4 only, IPv6 only.
	familyShift = 16
	// fallbackShift selects whether a re-created claim's request asks
	// for other addresses when one it asks for is held
	// (ipkeeper.io/requested-addresses-fallback: other-addresses), half
	// the time.
	fallbackShift = 20
)

// fallsBack says whether the request of step st asks for other addresses
// rather than wait for one someone holds.
func fallsBack(st step) bool { return (st.pick>>fallbackShift)%2 == 1 }

// requestKind is what a re-created claim of step st asks for.
func requestKind(st step) int {
	switch k := int((st.pick >> requestShift) % 8); {
	case k < requestFree:
		return requestNone
	case k < requestTaken:
		return requestFree
	default:
		return requestTaken
	}
}

// families says which IP families a claim request or edit of step st
// covers.
func families(st step) (v4, v6 bool) {
	switch (st.pick >> familyShift) % 3 {
	case 1:
		return true, false
	case 2:
		return false, true
	default:
		return true, true
	}
}

// rareEvery is how many steps apart node deletions (and, half-way between
// them, claim storms) come.
const rareEvery = 700

// scheduler draws steps from a seeded generator.
type scheduler struct {
	rng *rand.Rand
	seq int
}

func newScheduler(seed uint64) *scheduler {
	return &scheduler{rng: rand.New(rand.NewPCG(seed, 0x5eed0f0b5))}
}

func (s *scheduler) next() step {
	s.seq++
	st := step{seq: s.seq, kind: opKind(weighted(s.rng, opWeights[:])), node: s.rng.IntN(numNodes), flag: s.rng.IntN(2) == 0, pick: s.rng.Uint64()}
	switch s.seq % rareEvery {
	case rareEvery / 2:
		st.kind = opNodeDelete
	case 0:
		st.kind = opClaimStorm
	}
	switch st.kind {
	case opClaimStart, opClaimMigrate, opClaimRestart, opClaimDelete, opClaimEdit:
		st.pool = poolVM
	case opCheck:
		st.pool = []string{poolPods, poolPods, poolStatic, poolOdd, poolSmall, poolVM, poolVMPods, poolSticky}[s.rng.IntN(8)]
	default:
		st.pool = []string{poolPods, poolPods, poolPods, poolStatic, poolOdd, poolSmall, poolSmall, poolVMPods, poolSticky}[s.rng.IntN(9)]
	}
	st.slot = s.rng.IntN(poolSizes[st.pool])
	return st
}

// faultKind is a scheduled fault.
type faultKind int

const (
	fAgentKill faultKind = iota
	fControllerKill
	fAPIServerRestart
	fWatchExpiry // etcd compaction, then every watch cut: re-watches from compacted revisions
	fWatchCut
	fProxyBurst // a burst of one proxy fault kind
	numFaultKinds
)

var faultNames = [...]string{"agent-kill", "controller-kill", "apiserver-restart", "etcd-compaction+watch-cut", "watch-cut", "proxy-burst"}

func (k faultKind) String() string { return faultNames[k] }

var faultWeights = [numFaultKinds]int{fAgentKill: 5, fControllerKill: 2, fAPIServerRestart: 1, fWatchExpiry: 2, fWatchCut: 2, fProxyBurst: 4}

// fault is one scheduled fault: after wait, do kind (node or burst kind
// chosen by target).
type fault struct {
	seq    int
	wait   time.Duration
	kind   faultKind
	target int
	length time.Duration
}

type faultScheduler struct {
	rng   *rand.Rand
	seq   int
	first []faultKind // every kind once first, in a seeded order
}

func newFaultScheduler(seed uint64) *faultScheduler {
	s := &faultScheduler{rng: rand.New(rand.NewPCG(seed, 0xfa017))}
	for k := range numFaultKinds {
		s.first = append(s.first, k)
	}
	s.rng.Shuffle(len(s.first), func(i, j int) { s.first[i], s.first[j] = s.first[j], s.first[i] })
	return s
}

func (s *faultScheduler) next() fault {
	s.seq++
	f := fault{seq: s.seq, wait: time.Duration(1500+s.rng.IntN(3000)) * time.Millisecond,
		target: s.rng.IntN(1 << 20), length: time.Duration(500+s.rng.IntN(2000)) * time.Millisecond}
	if len(s.first) > 0 {
		f.kind, s.first = s.first[0], s.first[1:]
	} else {
		f.kind = faultKind(weighted(s.rng, faultWeights[:]))
	}
	return f
}

func weighted(rng *rand.Rand, weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	r := rng.IntN(total)
	for i, w := range weights {
		if r < w {
			return i
		}
		r -= w
	}
	return len(weights) - 1
}
