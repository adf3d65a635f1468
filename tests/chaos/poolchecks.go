// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"fmt"
	"net/netip"
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

// quotaProblem says how the live attachments of the run's namespace in
// the shared pool exceed its quota (I15), "" when they do not: every one
// that is live (its ADD succeeded, no DEL sent, its pod not deleted)
// holds its reservation, so more distinct addresses than smallQuota
// among them means an allocation went beyond it. Released addresses
// count against the quota too, so the namespace may be refused with fewer
// live ones; that is not judged here but at quiescence (quotaUsageProblem).
func (m *model) quotaProblem() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := map[netip.Addr]bool{}
	for _, a := range m.atts {
		if a.state == attLive && a.pool == smallPool && a.podNS == namespace {
			for _, ip := range a.ips {
				held[ip] = true
			}
		}
	}
	if len(held) <= smallQuota {
		return ""
	}
	return fmt.Sprintf("namespace %s has %d live attachments' addresses in IPPool %s, whose spec.maxAddressesPerNamespace is %d", namespace, len(held), smallPool, smallQuota)
}

// checkQuota checks I15 after a successful allocation in the shared pool.
func (r *runner) checkQuota(a *attachment) {
	if a.pool != smallPool {
		return
	}
	r.counts.inc("check:I15")
	if problem := r.model.quotaProblem(); problem != "" {
		r.violate("I15", "quota-exceeded", fmt.Sprintf("after the allocation of %s: %s", r.model.describe(a), problem), a.podName, a.containerID)
	}
}

// quotaUsageProblems says, at quiescence, which namespaces hold more
// reservations of a pool with a quota than it allows (I15), released ones
// included: no create is in flight then, so none is over it even for a
// moment. The run never lowers a quota below what a namespace holds.
func quotaUsageProblems(ls *liveState) []string {
	held := map[[2]string]int{}
	for _, r := range ls.res {
		held[[2]string{r.Spec.Pool, r.Spec.Owner.Namespace}]++
	}
	var out []string
	for k, n := range held {
		p := ls.pools[k[0]]
		if p == nil || p.Spec.MaxAddressesPerNamespace == nil || n <= int(*p.Spec.MaxAddressesPerNamespace) {
			continue
		}
		out = append(out, fmt.Sprintf("namespace %s holds %d reservations of IPPool %s, whose spec.maxAddressesPerNamespace is %d", k[1], n, k[0], *p.Spec.MaxAddressesPerNamespace))
	}
	sort.Strings(out)
	return out
}

// checkQuotaUsage checks I15 at quiescence.
func (r *runner) checkQuotaUsage(ls *liveState) {
	r.counts.inc("check:I15")
	for _, problem := range quotaUsageProblems(ls) {
		r.violate("I15", "quota-exceeded-at-quiescence", problem)
	}
}
