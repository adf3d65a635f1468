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
	opGC                         // CNI GC on one node and network with the runtime's valid attachments
	opPodDelete                  // the pod is deleted, after a DEL or with the DEL lost
	opClaimStart                 // claim-backed pods start (one, or two on two nodes at once)
	opClaimMigrate               // a second pod of the claim on another node, then the first goes
	opClaimRestart               // the claim's pods go and a new one starts: same addresses
	opClaimDelete                // the claim's pods go, the claim is deleted and made again
	opPoolResize                 // the shared pool grows by a range, or loses it while addresses there are held
	numOpKinds
)

var opNames = [...]string{"add", "new-sandbox", "del", "stale-del", "check", "gc", "pod-delete",
	"claim-start", "claim-migrate", "claim-restart", "claim-delete", "pool-resize"}

func (k opKind) String() string { return opNames[k] }

// opWeights give the mix.
var opWeights = [numOpKinds]int{
	opAdd: 30, opNewSandbox: 10, opDel: 12, opStaleDel: 6, opCheck: 8, opGC: 3, opPodDelete: 8,
	opClaimStart: 8, opClaimMigrate: 6, opClaimRestart: 4, opClaimDelete: 3, opPoolResize: 1,
}

// Slot pools. Ordinary pods on a /24, static-IP pods on the same
// network, pods of two networks sharing a /28 pool (more slots than
// addresses; even slots on one network, odd on the other), claim slots.
const (
	poolPods   = "pods"
	poolStatic = "static"
	poolSmall  = "small"
	poolVM     = "vm"
)

var poolSizes = map[string]int{poolPods: 36, poolStatic: 8, poolSmall: 20, poolVM: 10}

// step is one scheduled operation. The schedule is a pure function of
// the seed: which operation, on which slot, with which variations; what
// it does depends on the slot's state when it runs.
type step struct {
	seq  int
	kind opKind
	pool string
	slot int
	node int    // for GC, and the node a claim pod starts on
	flag bool   // a variation: racing stale DEL, DEL before pod deletion, two first pods of a claim
	pick uint64 // further choices (which old sandbox ...)
}

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
	switch st.kind {
	case opClaimStart, opClaimMigrate, opClaimRestart, opClaimDelete:
		st.pool = poolVM
	case opCheck:
		st.pool = []string{poolPods, poolPods, poolStatic, poolSmall, poolVM}[s.rng.IntN(5)]
	default:
		st.pool = []string{poolPods, poolPods, poolPods, poolStatic, poolSmall, poolSmall}[s.rng.IntN(6)]
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
