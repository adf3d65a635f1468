// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"fmt"
	"sort"

	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// poolUsageProblem says how pool's status, at quiescence, does not count
// its reservations (I14), "" when it does: it observed the pool's
// generation, and its used and out-of-range counts add up to the distinct
// addresses the pool's reservations hold, cooling down ones among the
// used. ipkeeper-controller writes a change of counts alone up to
// poolstatus.DefaultUsageInterval late, never a partial count.
func poolUsageProblem(pool *ipkv1alpha1.IPPool, res map[string]*ipkv1alpha1.IPReservation) string {
	held := map[string]bool{}
	for _, r := range res {
		if r.Spec.Pool == pool.Name {
			held[r.Spec.IP] = true
		}
	}
	st := &pool.Status
	switch {
	case st.ObservedGeneration != pool.Generation:
		return fmt.Sprintf("its status observed generation %d, the pool is at %d", st.ObservedGeneration, pool.Generation)
	case st.Used+st.OutOfRange != int64(len(held)):
		ips := make([]string, 0, len(held))
		for ip := range held {
			ips = append(ips, ip)
		}
		sort.Strings(ips)
		return fmt.Sprintf("its status counts %d used and %d out of range, its reservations hold %d addresses %v", st.Used, st.OutOfRange, len(held), ips)
	case st.CoolingDown > st.Used:
		return fmt.Sprintf("its status counts %d cooling down, more than the %d used", st.CoolingDown, st.Used)
	}
	return ""
}

// poolsSettled reports whether every pool's status counts its
// reservations.
func poolsSettled(ls *liveState) bool {
	for _, p := range ls.pools {
		if poolUsageProblem(p, ls.res) != "" {
			return false
		}
	}
	return true
}

// checkPoolUsage checks I14 at quiescence.
func (r *runner) checkPoolUsage(ls *liveState) {
	for _, p := range ls.pools {
		r.counts.inc("check:I14")
		if problem := poolUsageProblem(p, ls.res); problem != "" {
			r.violate("I14", "pool-status-off", fmt.Sprintf("IPPool %s: %s", p.Name, problem), p.Name)
		}
	}
}
