// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// checkLockKeys checks I7: a reservation is named from its pool's lock key
// and its address, whoever wrote it. A reservation whose pool is not in
// the list read before it is skipped (counted): pools are never deleted
// here, so that is a harness problem, not ipkeeper's.
func (r *runner) checkLockKeys(ls *liveState) {
	for name, res := range ls.res {
		r.counts.inc("check:I7-scope")
		if why := watchScopeProblem(res); why != "" {
			r.violate("I7", "watch-scope", fmt.Sprintf("reservation %s (%s of %s %s/%s, spec.node %q, labels %v) %s",
				name, res.Spec.IP, res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, res.Spec.Node, res.Labels, why), name, res.Spec.Owner.Name)
		}
		pool := ls.pools[res.Spec.Pool]
		ip, err := netip.ParseAddr(res.Spec.IP)
		if pool == nil || err != nil {
			r.counts.inc("check:I7-skipped")
			continue
		}
		r.counts.inc("check:I7")
		if want := naming.Reservation(pool.LockKey(), ip); name != want {
			r.violate("I7", "not-the-lock-key", fmt.Sprintf("reservation %s of %s (pool %s, lock key %q, network %s, owner %s %s/%s) is not named %s",
				name, ip, pool.Name, pool.LockKey(), res.Spec.Network, res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, want),
				name, res.Spec.Owner.Name)
		}
	}
}

// watchScopeProblem says why a reservation is not in exactly one watch
// scope ("" when it is): labelled ipkeeper.io/node with its node (a pod's,
// in its node's block: that node's agent watches it) or shared (every
// agent does), or ipkeeper.io/claims-block (a claim's: no agent does).
// In none, no agent would see it (it costs a failed create, not a
// duplicate, but nothing here writes one); a claim's labelled with a node
// would be seen by one agent only.
func watchScopeProblem(res *ipkv1alpha1.IPReservation) string {
	node, labelled := res.Labels[naming.NodeLabel]
	claims := res.Labels[naming.ClaimsBlockLabel] == "true"
	claimOwned := res.Spec.Owner.Kind == ipkv1alpha1.OwnerIPAMClaim || res.Spec.Owner.Kind == ipkv1alpha1.OwnerIPAddressClaim
	switch {
	case labelled && claims:
		return "is in two watch scopes (" + naming.NodeLabel + " and " + naming.ClaimsBlockLabel + ")"
	case !labelled && !claims:
		return "is in no watch scope: no agent would see it"
	case !labelled || node == naming.SharedNodeLabelValue:
		return ""
	case claimOwned:
		return "is a claim's but labelled with a node: only that node's agent would see it"
	case node != naming.NodeLabelValue(res.Spec.Node):
		return "is labelled with another node than its spec.node"
	}
	return ""
}

// causedPools are the pools something of the run made: the named pool
// the harness created, and the inline pool of each NAD it made that
// ipkeeper accepts.
func causedPools() map[string]bool {
	out := map[string]bool{smallPool: true, stickyPool: true}
	for _, set := range []map[string]*network{networks, vmNetworks} {
		for _, n := range set {
			out[n.pool] = true
		}
	}
	return out
}

// checkCaused checks I8 at quiescence.
func (r *runner) checkCaused(ctx context.Context, ls *liveState) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	caused := causedPools()
	for name, p := range ls.pools {
		r.counts.inc("check:I8")
		if !caused[name] {
			r.violate("I8", "pool-nobody-caused", fmt.Sprintf("IPPool %s (lock key %q, ranges %+v) is neither the harness's nor the inline pool of an accepted NAD%s",
				name, p.LockKey(), p.Spec.Ranges, r.refusedNote(name)), name)
		}
	}
	var nodes corev1.NodeList
	var blocks ipkv1alpha1.IPBlockList
	if err := r.c.cp.Client.List(ctx, &nodes); err != nil {
		r.harnessError(fmt.Errorf("listing nodes at quiescence: %w", err))
		return
	}
	if err := r.c.cp.Client.List(ctx, &blocks); err != nil {
		r.harnessError(fmt.Errorf("listing IPBlocks at quiescence: %w", err))
		return
	}
	nodeUIDs := map[string]string{}
	for _, n := range nodes.Items {
		nodeUIDs[n.Name] = string(n.UID)
	}
	for _, b := range blocks.Items {
		r.counts.inc("check:I8")
		switch {
		case ls.pools[b.Spec.Pool] == nil:
			r.violate("I8", "block-of-no-pool", fmt.Sprintf("IPBlock %s (%s) is of pool %s, which does not exist", b.Name, b.Spec.CIDR, b.Spec.Pool), b.Name)
		case b.Spec.Holder != ipkv1alpha1.HolderIPAMClaims && nodeUIDs[b.Spec.Node] == "":
			r.violate("I8", "block-of-no-node", fmt.Sprintf("IPBlock %s (%s of pool %s) is held by node %s, which does not exist", b.Name, b.Spec.CIDR, b.Spec.Pool, b.Spec.Node), b.Name)
		}
	}
	mine := map[string]bool{}
	for _, cs := range r.claims {
		mine[cs.name] = true
	}
	for _, c := range ls.claims {
		r.counts.inc("check:I8")
		if !mine[c.Name] {
			r.violate("I8", "claim-nobody-caused", fmt.Sprintf("IPAMClaim %s/%s is not one the harness made", c.Namespace, c.Name), c.Name)
		}
	}
	for _, c := range ls.vmClaims {
		r.counts.inc("check:I8")
		if !r.isVMClaim(c.Name) {
			r.violate("I8", "claim-nobody-caused", fmt.Sprintf("IPAMClaim %s/%s is of none of the harness's VMs", c.Namespace, c.Name), c.Name)
		}
	}
	r.checkCAPICaused(ctx)
}

// refusedNote says when a pool is one of a definition ipkeeper refused.
func (r *runner) refusedNote(pool string) string {
	r.refusedMu.Lock()
	defer r.refusedMu.Unlock()
	if nad, ok := r.refused[pool]; ok {
		return fmt.Sprintf(": it is the pool of NAD %s, whose definition was refused", nad)
	}
	return ""
}

// isVMClaim reports whether name is a claim of one of the harness's VMs'
// logical networks (on any of their networks).
func (r *runner) isVMClaim(name string) bool {
	found := false
	r.vmNames.Range(func(vm, _ any) bool {
		for _, logical := range []string{blue, red} {
			if name == naming.Claim(vm.(string), logical) {
				found = true
			}
			for _, n := range vmNetworks {
				found = found || name == naming.SwappedClaim(vm.(string), logical, n.name)
			}
		}
		return !found
	})
	return found
}
