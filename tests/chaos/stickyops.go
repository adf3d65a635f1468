// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
)

// Sticky by MAC (the sticky slots, on the sticky_mac network chaos-sticky
// whose pool cools released addresses down for stickyCooldown): the two
// slots of a pair, on different nodes, present one MAC, one pod at a time
// (sticky.holder). I13: an ADD of a sticky slot that succeeded at its
// first try, after the DEL of the MAC's last attachment succeeded (not a
// DEL racing the pod's next sandbox: that may rightly release nothing)
// and within the cooldown of the first DEL that may have released it
// (a failed one whose write was done), gets the MAC's last address back, whichever
// node it runs on; unless another holder took the address in the moment
// between the take-back's delete and create (counted as a lost race, and
// judged by I1 like any other address). At quiescence every reservation
// labelled with a MAC is a pod's of the sticky network, labelled with a
// MAC a sticky slot presents.

// stickyMAC is the MAC the slots of pair k present: locally
// administered, neither an IPv4-derived one nor a VM's own.
func stickyMAC(k int) string { return fmt.Sprintf("02:00:5e:66:00:%02x", k) }

// stickyMargin is how much of the cooldown after a DEL's success I13 does
// not judge: the reservation was retired when the agent handled the DEL,
// a moment before the harness got the answer.
const stickyMargin = 3 * time.Second

// stickyRecord is what the harness knows of one MAC's address.
type stickyRecord struct {
	ip  netip.Addr
	att *attachment // the attachment that holds or held ip
	// releasedAt is when att's DEL succeeded, or when its first failed
	// DEL was sent (failedDelAt); zero while att holds ip, and when ip
	// went otherwise (the pod deleted without its DEL: the controller's
	// garbage collector releases it at a time unknown here).
	releasedAt time.Time
	// failedDelAt is when the first of att's DELs that failed was sent: a
	// DEL whose answer was lost (the agent killed after its write) may
	// have released ip then, and its cooldown may be over by the DEL
	// that succeeds (chaos seed 4128).
	failedDelAt time.Time
	// tries counts the ADDs sent since releasedAt.
	tries int
	// released: att's address went (its first successful DEL, or its pod
	// deleted); a DEL the runtime repeats later releases nothing new.
	released bool
}

type stickyState struct {
	mu     sync.Mutex
	holder map[string]*slot // MAC -> the slot whose pod presents it
	last   map[string]*stickyRecord
}

// take gives the MAC of s to s's next pod; false when the pair's other
// slot has a pod presenting it.
func (st *stickyState) take(s *slot) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if h := st.holder[s.mac]; h != nil && h != s {
		return false
	}
	st.holder[s.mac] = s
	return true
}

// stickyPodGone records that s's pod is gone (deleted, after its DEL when
// delSent): its MAC is free for the pair's other slot.
func (r *runner) stickyPodGone(s *slot, delSent bool) {
	if s.mac == "" {
		return
	}
	st := &r.sticky
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.holder[s.mac] == s {
		delete(st.holder, s.mac)
	}
	if rec := st.last[s.mac]; rec != nil && !delSent {
		rec.releasedAt, rec.released = time.Time{}, true
	}
}

// isSticky says whether a is an attachment of a sticky slot.
func isSticky(a *attachment) bool {
	return a.mac != "" && a.network == networks[poolSticky].name
}

// stickyExpect is called before the ADD of a: the address it must get
// back if the ADD succeeds before deadline (ok false: nothing to judge).
func (r *runner) stickyExpect(a *attachment) (want netip.Addr, deadline time.Time, ok bool) {
	st := &r.sticky
	st.mu.Lock()
	defer st.mu.Unlock()
	rec := st.last[a.mac]
	if rec == nil || rec.releasedAt.IsZero() {
		return netip.Addr{}, time.Time{}, false
	}
	rec.tries++
	if rec.tries > 1 {
		return netip.Addr{}, time.Time{}, false
	}
	// The harness saw the DEL succeed after the agent retired the
	// reservation: allow for the answer's way back.
	return rec.ip, rec.releasedAt.Add(stickyCooldown - stickyMargin), true
}

// stickyDelFailed records that a DEL of a, sent at sent, failed: it may
// have released a's address all the same.
func (r *runner) stickyDelFailed(a *attachment, sent time.Time) {
	st := &r.sticky
	st.mu.Lock()
	defer st.mu.Unlock()
	if rec := st.last[a.mac]; rec != nil && rec.att == a && !rec.released && rec.failedDelAt.IsZero() {
		rec.failedDelAt = sent
	}
}

// stickyReleased records a successful DEL of a: the address was released
// then, or already by an earlier DEL that failed (the earliest time is
// the one judged from).
func (r *runner) stickyReleased(a *attachment) {
	st := &r.sticky
	st.mu.Lock()
	defer st.mu.Unlock()
	if rec := st.last[a.mac]; rec != nil && rec.att == a && !a.lateDel && !rec.released {
		at := time.Now()
		if !rec.failedDelAt.IsZero() {
			at = rec.failedDelAt
		}
		rec.releasedAt, rec.tries, rec.released = at, 0, true
	}
}

// stickyAdded checks I13 for a successful ADD of a and records its
// address as the MAC's.
func (r *runner) stickyAdded(a *attachment, ips []netip.Addr, want netip.Addr, deadline time.Time, judged bool) {
	st := &r.sticky
	st.mu.Lock()
	rec := st.last[a.mac]
	prev := netip.Addr{}
	if rec != nil {
		prev = rec.ip
	}
	if len(ips) > 0 {
		st.last[a.mac] = &stickyRecord{ip: ips[0], att: a}
	}
	st.mu.Unlock()
	got := slices.Contains(ips, want)
	switch {
	case judged && got:
		r.counts.inc("sticky:kept")
	case judged && time.Now().After(deadline):
		r.counts.inc("sticky:late") // its cooldown over, the address is anybody's
	case judged && r.model.heldByOther(a, want):
		r.counts.inc("sticky:lost-race")
	case judged:
		r.violate("I13", "sticky-address-lost", fmt.Sprintf("ADD of %s presenting MAC %s got %s, not %s, which the MAC's last attachment released %s before (cooldown %s)",
			r.model.describe(a), a.mac, formatAddrs(ips), want, stickyCooldown-stickyMargin-time.Until(deadline).Round(time.Millisecond), stickyCooldown), a.podName, a.containerID)
	case prev.IsValid() && slices.Contains(ips, prev):
		r.counts.inc("sticky:kept-unjudged")
	default:
		r.counts.inc("sticky:new")
	}
	r.counts.inc("check:I13")
}

// checkStickyLabels checks I13 at quiescence: only the sticky network's
// pods' reservations carry a MAC, one a sticky slot presents.
func (r *runner) checkStickyLabels(ls *liveState) {
	macs := map[string]bool{}
	for k := range poolSizes[poolSticky] / 2 {
		mac, err := net.ParseMAC(stickyMAC(k))
		if err != nil {
			panic(err) // a constant format
		}
		macs[macaddr.LabelValue(mac)] = true
	}
	for _, res := range ls.res {
		v, ok := res.Labels[macaddr.Label]
		if !ok {
			continue
		}
		r.counts.inc("check:I13")
		if !macs[v] || res.Spec.Network != networks[poolSticky].name || res.Spec.Owner.Kind != "Pod" {
			r.violate("I13", "mac-label-elsewhere", fmt.Sprintf("reservation %s (network %s, owner %s %s/%s) is labelled %s=%s; only the sticky network's pods' are, with a MAC they present",
				res.Name, res.Spec.Network, res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, macaddr.Label, v), res.Name)
		}
	}
}

// heldByOther says whether a live attachment of another holder holds ip
// in a's pool.
func (m *model) heldByOther(a *attachment, ip netip.Addr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.atts {
		if o != a && o.state == attLive && o.holder() != a.holder() && o.pool == a.pool && slices.Contains(o.ips, ip) {
			return true
		}
	}
	return false
}
