// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"reflect"
	"testing"
)

// The same seed must replay the same schedule of operations, faults and
// proxy decisions; another seed must give another one.
func TestScheduleIsAFunctionOfTheSeed(t *testing.T) {
	ops := func(seed uint64) []step {
		s := newScheduler(seed)
		out := make([]step, 2*rareEvery) // node deletions and claim storms come every rareEvery steps
		for i := range out {
			out[i] = s.next()
		}
		return out
	}
	faults := func(seed uint64) []fault {
		s := newFaultScheduler(seed)
		out := make([]fault, 50)
		for i := range out {
			out[i] = s.next()
		}
		return out
	}
	decisions := func(seed uint64) []proxyFault {
		p := &apiProxy{rng: newProxyRand(seed), rates: backgroundRates, enabled: true}
		out := make([]proxyFault, 2000)
		for i := range out {
			out[i] = p.decide(i%7 == 0, i%2 == 0)
		}
		return out
	}
	if !reflect.DeepEqual(ops(7), ops(7)) || !reflect.DeepEqual(faults(7), faults(7)) || !reflect.DeepEqual(decisions(7), decisions(7)) {
		t.Fatal("seed 7 gave two different schedules")
	}
	if reflect.DeepEqual(ops(7), ops(8)) || reflect.DeepEqual(faults(7), faults(8)) || reflect.DeepEqual(decisions(7), decisions(8)) {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
	// Every operation, every slot pool and every kind of claim request
	// is drawn, so a short run can exercise them.
	kinds, pools, requests := map[opKind]bool{}, map[string]bool{}, map[int]bool{}
	for _, st := range ops(7) {
		kinds[st.kind], pools[st.pool] = true, true
		if st.kind == opClaimDelete {
			requests[requestKind(st)] = true
		}
	}
	if len(kinds) != int(numOpKinds) || len(pools) != len(poolSizes) || len(requests) != 3 {
		t.Fatalf("%d steps drew %d of %d operations, %d of %d slot pools, %d of 3 claim requests", 2*rareEvery, len(kinds), numOpKinds, len(pools), len(poolSizes), len(requests))
	}
	// Every fault kind comes once before any repeats, so a short run
	// sees them all.
	seen := map[faultKind]bool{}
	for _, f := range faults(7)[:numFaultKinds] {
		seen[f.kind] = true
	}
	if len(seen) != int(numFaultKinds) {
		t.Fatalf("the first %d faults cover %d kinds", numFaultKinds, len(seen))
	}
}
