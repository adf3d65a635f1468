// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// Claim-backed pods, as a VM's launcher pods: each references its slot's
// IPAMClaim from the networks annotation ("ipam-claim-reference") of a
// NAD that allows persistent IPs. Two pods of one claim on two nodes at
// once are a live migration (or its first allocation racing).

// claimOp runs one step on a claim slot.
func (r *runner) claimOp(ctx context.Context, st step, cs *claimSlot) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.uid == "" {
		claim, err := r.createClaim(ctx, st.seq, cs.name)
		if err != nil {
			return
		}
		cs.uid, cs.ips = claim.UID, nil
	}
	if st.kind == opCheck {
		if len(cs.pods) > 0 {
			p := cs.pods[int(st.pick%uint64(len(cs.pods)))]
			r.check(ctx, st.seq, p.node, networks[poolVM], p.att, "")
		}
		return
	}
	done := r.model.touch("claim/" + string(cs.uid))
	defer done()
	if !r.flushPending(ctx, st.seq, &cs.pending) {
		return
	}
	switch st.kind {
	case opClaimStart:
		if len(cs.pods) == 0 {
			nodes := []int{st.node}
			if st.flag { // first allocation on two nodes at once
				nodes = append(nodes, (st.node+1+int(st.pick%2))%numNodes)
			}
			r.startClaimPods(ctx, st.seq, cs, nodes, nil)
			return
		}
		p := cs.pods[int(st.pick%uint64(len(cs.pods)))]
		r.repeatAdd(ctx, st.seq, p.node, networks[poolVM], p.att, "")
	case opClaimMigrate:
		switch len(cs.pods) {
		case 0:
			r.startClaimPods(ctx, st.seq, cs, []int{st.node}, nil)
		case 1:
			src := cs.pods[0]
			target := (slices.Index(r.c.nodes, src.node) + 1 + int(st.pick%2)) % numNodes
			var again *claimPod
			if st.flag { // the source's ADD retried while the target's runs
				again = src
			}
			r.startClaimPods(ctx, st.seq, cs, []int{target}, again)
			if len(cs.pods) == 2 {
				r.stopClaimPod(ctx, st.seq, cs, src)
			}
		default:
			r.stopClaimPod(ctx, st.seq, cs, cs.pods[0])
		}
	case opClaimRestart:
		for _, p := range slices.Clone(cs.pods) {
			r.stopClaimPod(ctx, st.seq, cs, p)
		}
		r.startClaimPods(ctx, st.seq, cs, []int{st.node}, nil)
	case opClaimDelete:
		for _, p := range slices.Clone(cs.pods) {
			r.stopClaimPod(ctx, st.seq, cs, p)
		}
		if len(cs.pods) > 0 {
			return // a pod could not be deleted; the claim stays
		}
		if err := r.deleteClaim(ctx, st.seq, cs.name); err != nil {
			return
		}
		r.counts.inc("claims-deleted")
		cs.uid, cs.ips, cs.pending = "", nil, nil
		claim, err := r.createClaim(ctx, st.seq, cs.name)
		if err != nil {
			return
		}
		cs.uid = claim.UID
	}
}

// startClaimPods creates one launcher pod per node index and sends their
// ADDs at once (plus a repeated ADD of again, if set). Pods whose ADD
// failed are torn down and deleted. All pods of the claim must get the
// claim's addresses, and the same as before while the claim lives (I4).
func (r *runner) startClaimPods(ctx context.Context, op int, cs *claimSlot, nodes []int, again *claimPod) {
	net := networks[poolVM]
	var started []*claimPod
	for _, i := range nodes {
		n := r.c.nodes[i]
		elem := map[string]any{"name": net.nad, "namespace": namespace, "interface": ifName, multus.ClaimRefKey: cs.name}
		pod, err := r.createPod(ctx, op, fmt.Sprintf("vm-%d-p%d", cs.idx, r.id()), n.name, elem)
		if err != nil {
			continue
		}
		a := r.newAttachment(pod, n, net)
		a.claimName, a.claimUID = cs.name, cs.uid
		started = append(started, &claimPod{pod: pod, node: n, att: a})
	}
	var wg sync.WaitGroup
	pendings := make([][]*attachment, len(started))
	for i, p := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.add(ctx, op, p.node, net, p.att, "", &pendings[i])
		}()
	}
	if again != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.repeatAdd(ctx, op, again.node, net, again.att, "")
		}()
	}
	wg.Wait()
	for i, p := range started {
		cs.pending = append(cs.pending, pendings[i]...)
		if r.model.stateOf(p.att) != attLive {
			// The pod goes; a DEL that failed stays owed (the kubelet
			// keeps tearing the sandbox down), so the attachment is dead
			// only once its DEL got through.
			if err := r.deletePod(ctx, op, p.pod); err == nil && !slices.Contains(cs.pending, p.att) {
				r.model.setState(p.att, attDead)
			}
			continue
		}
		ips := r.model.ipsOf(p.att)
		if cs.ips != nil && !slices.Equal(ips, cs.ips) {
			r.violate("I4", "claim-addresses-changed", fmt.Sprintf("IPAMClaim %s (uid %s) had given its pods %s, now %s gets %s",
				cs.name, cs.uid, formatAddrs(cs.ips), r.model.describe(p.att), formatAddrs(ips)), cs.name, p.pod.Name)
		}
		cs.ips = ips
		cs.pods = append(cs.pods, p)
	}
}

// stopClaimPod tears a launcher pod down: DEL, then the pod is deleted.
func (r *runner) stopClaimPod(ctx context.Context, op int, cs *claimSlot, p *claimPod) {
	r.model.setState(p.att, attReleasing)
	if _, err := r.cni(ctx, op, p.node, cniproto.CmdDel, p.att, networks[poolVM].netConf("")); err != nil {
		r.counts.inc("lost-del")
	}
	if err := r.deletePod(ctx, op, p.pod); err != nil {
		return
	}
	r.model.setState(p.att, attDead)
	cs.pods = slices.DeleteFunc(cs.pods, func(q *claimPod) bool { return q == p })
}
