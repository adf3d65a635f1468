// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
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
		claim, err := r.createClaim(ctx, st.seq, cs.name, nil, false)
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
		gone := cs.uid
		if !r.dropClaim(ctx, st.seq, cs) || st.drop {
			return
		}
		requested, err := r.chooseRequest(ctx, st, gone)
		if err != nil {
			return
		}
		claim, err := r.createClaim(ctx, st.seq, cs.name, requested, len(requested) > 0 && fallsBack(st))
		if err != nil {
			return
		}
		cs.uid = claim.UID
		if len(requested) > 0 {
			r.observeRequest(ctx, claim)
		}
	case opClaimEdit:
		r.editClaim(ctx, st, cs)
	}
}

// observeRequest reads a claim made with a request until its
// RequestedAddresses condition is set (at most requestSeen), and counts
// it as the continuous checks do: on a loaded machine they may look only
// once the request's holder let the address go, and miss its refusal.
func (r *runner) observeRequest(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) {
	_ = framework.Eventually(ctx, requestSeen, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		var c ipamclaimsv1alpha1.IPAMClaim
		if err := r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionRequested)
		if c.UID != claim.UID || cond == nil {
			return c.UID != claim.UID, nil
		}
		r.counts.incOnce("requested:"+string(cond.Status)+"/"+cond.Reason, string(c.UID))
		return true, nil
	})
}

// requestSeen bounds observeRequest.
const requestSeen = 2 * time.Second

// dropClaim stops the slot's pods and deletes its claim; false if a pod
// or the claim could not be deleted (the claim stays).
func (r *runner) dropClaim(ctx context.Context, op int, cs *claimSlot) bool {
	for _, p := range slices.Clone(cs.pods) {
		r.stopClaimPod(ctx, op, cs, p)
	}
	if len(cs.pods) > 0 {
		return false
	}
	if err := r.deleteClaim(ctx, op, cs.name); err != nil {
		return false
	}
	r.counts.inc("claims-deleted")
	cs.uid, cs.ips, cs.pending = "", nil, nil
	return true
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
	errs := make([]error, len(started))
	for i, p := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.add(ctx, op, p.node, net, p.att, "", &pendings[i])
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
		if errs[i] != nil {
			r.claimAddFailed(cs, p, errs[i])
		}
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
		if cs.ips != nil && !sameSet(ips, cs.ips) {
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

// claimAddFailed judges a launcher pod's failed ADD. A claim ipkeeper-
// controller has not filled (yet: just made, the controller down, or its
// request refused) fails the ADD with code 11 once the agent's wait is
// over: the pod's ADD failed, nothing more. A claim that records an
// address not reserved for it fails the ADD with code 11 (nobody holds
// it: the controller reserves it soon) or 7 (someone else holds it): only
// right after the harness moved its addresses is either a state the
// design allows.
func (r *runner) claimAddFailed(cs *claimSlot, p *claimPod, err error) {
	code, ok := cniCode(err)
	edited := r.model.claimFacts(p.att.claimUID).edit != nil
	switch {
	case !ok:
	case code == 11 && strings.Contains(err.Error(), "has no addresses"):
		r.counts.inc("claim-unfilled")
		// The agent names the controller's reason when it has one.
		if strings.Contains(err.Error(), claimstatus.ConditionRequested+"=False") {
			r.counts.inc("claim-unfilled-refused")
		}
	case (code == 7 || code == 11 && strings.Contains(err.Error(), "has no reservation")) && edited:
		r.counts.inc("claim-refused-after-edit")
	case code == 7 || code == 11 && strings.Contains(err.Error(), "has no reservation"):
		r.violate("I4", "claim-add-refused", fmt.Sprintf("ADD of %s was refused although the harness never edited IPAMClaim %s (uid %s): %v",
			r.model.describe(p.att), cs.name, cs.uid, err), cs.name, p.pod.Name, p.att.containerID)
	}
}

// The addresses of the claims' network a request or an edit picks from:
// inside both ranges (10.62.0.0/24, fd62::/120), clear of their first
// and last addresses.
const (
	vmAddrFirst = 10
	vmAddrCount = 240
)

func vmAddr(v4 bool, i int) netip.Addr {
	i = vmAddrFirst + i%vmAddrCount
	if v4 {
		return netip.AddrFrom4([4]byte{10, 62, 0, byte(i)})
	}
	b := netip.MustParseAddr("fd62::").As16()
	b[15] = byte(i)
	return netip.AddrFrom16(b)
}

// vmHeld lists, live, who holds each address of the claims' pool
// (released reservations included: they are not free either).
func (r *runner) vmHeld(ctx context.Context, op int) (map[netip.Addr]*ipkv1alpha1.IPReservation, error) {
	held := map[netip.Addr]*ipkv1alpha1.IPReservation{}
	err := r.api(ctx, op, "list-reservations", networks[poolVM].pool, func(ctx context.Context) error {
		var list ipkv1alpha1.IPReservationList
		if err := r.c.cp.Client.List(ctx, &list); err != nil {
			return err
		}
		clear(held)
		for i := range list.Items {
			res := &list.Items[i]
			if res.Spec.Pool != networks[poolVM].pool {
				continue
			}
			if ip, err := netip.ParseAddr(res.Spec.IP); err == nil {
				held[ip] = res
			}
		}
		return nil
	})
	return held, err
}

// freeVMAddr returns an address of the family no one holds, the first
// from the step's pick on; avoid are addresses not to pick either.
func freeVMAddr(held map[netip.Addr]*ipkv1alpha1.IPReservation, v4 bool, pick uint64, avoid []netip.Addr) (netip.Addr, bool) {
	for k := range vmAddrCount {
		ip := vmAddr(v4, int(pick%vmAddrCount)+k)
		if held[ip] == nil && !slices.Contains(avoid, ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// chooseRequest picks what a re-created claim asks for (requestKind): no
// addresses, free ones, or, for one family, an address someone holds now
// (another claim, a pod; not the deleted claim gone, whose addresses the
// garbage collector is about to release): the controller must refuse it
// (Taken) and fill the claim once it is free, never hand it out twice.
func (r *runner) chooseRequest(ctx context.Context, st step, gone types.UID) ([]netip.Addr, error) {
	kind := requestKind(st)
	if kind == requestNone {
		return nil, nil
	}
	held, err := r.vmHeld(ctx, st.seq)
	if err != nil {
		return nil, err
	}
	v4, v6 := families(st)
	var out []netip.Addr
	for _, fam := range []struct{ want, is4 bool }{{v4, true}, {v6, false}} {
		if !fam.want {
			continue
		}
		if kind == requestTaken && len(out) == 0 {
			// The held addresses of the family, in a fixed order.
			var taken []netip.Addr
			for ip, res := range held {
				if ip.Is4() == fam.is4 && !res.Spec.Released() && res.Spec.Owner.UID != gone {
					taken = append(taken, ip)
				}
			}
			slices.SortFunc(taken, netip.Addr.Compare)
			if len(taken) > 0 {
				out = append(out, taken[int(st.pick%uint64(len(taken)))])
				r.counts.inc("claim-requests-taken")
				continue
			}
		}
		if ip, ok := freeVMAddr(held, fam.is4, st.pick, nil); ok {
			out = append(out, ip)
		}
	}
	if kind == requestFree {
		r.counts.inc("claim-requests-free")
	}
	return out, nil
}

// editClaim plays an administrator who moves a filled claim to other
// free addresses of its network (one family or both): the VM is stopped
// (its pods go), status.ips is edited, and the VM is started again at
// once (flag) or later. ipkeeper-controller then reserves the new
// addresses and releases the old ones once the claim holds the new ones;
// the pods get the new addresses from then on (I4). A claim that does not
// hold exactly what it records yet (being filled, or a previous edit not
// done) is left alone.
func (r *runner) editClaim(ctx context.Context, st step, cs *claimSlot) {
	held, err := r.vmHeld(ctx, st.seq)
	if err != nil {
		return
	}
	var claim ipamclaimsv1alpha1.IPAMClaim
	err = r.api(ctx, st.seq, "get-claim", cs.name, func(ctx context.Context) error {
		return r.c.cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cs.name}, &claim)
	})
	if err != nil || claim.UID != cs.uid {
		return
	}
	from := claimIPs(claim.Status.IPs)
	var mine []netip.Addr
	for ip, res := range held {
		if res.Spec.Owner.UID == claim.UID && !res.Spec.Released() {
			mine = append(mine, ip)
		}
	}
	if len(from) == 0 || !sameSet(from, mine) {
		r.counts.inc("claim-edit-skipped")
		return
	}
	for _, p := range slices.Clone(cs.pods) {
		r.stopClaimPod(ctx, st.seq, cs, p)
	}
	if len(cs.pods) > 0 {
		return // a pod could not be deleted; the VM still runs
	}
	v4, v6 := families(st)
	ips := slices.Clone(claim.Status.IPs)
	to := slices.Clone(from)
	for i, ip := range from {
		if ip.Is4() && !v4 || !ip.Is4() && !v6 {
			continue
		}
		next, ok := freeVMAddr(held, ip.Is4(), st.pick, to)
		if !ok {
			continue
		}
		to[i] = next
		bits := ip.BitLen()
		if p, err := netip.ParsePrefix(ips[i]); err == nil {
			bits = p.Bits()
		}
		ips[i] = netip.PrefixFrom(next, bits).String()
	}
	if slices.Equal(to, from) {
		r.counts.inc("claim-edit-skipped")
		return
	}
	var (
		changed bool         // the claim recorded something else than from
		now     []netip.Addr // what it recorded then
	)
	err = r.api(ctx, st.seq, "edit-claim-status", fmt.Sprintf("%s %s -> %s", cs.name, formatAddrs(from), formatAddrs(to)), func(ctx context.Context) error {
		var cur ipamclaimsv1alpha1.IPAMClaim
		if err := r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(&claim), &cur); err != nil {
			return err
		}
		switch now = claimIPs(cur.Status.IPs); {
		case cur.UID != claim.UID:
			return fmt.Errorf("IPAMClaim %s was replaced (uid %s, was %s)", cs.name, cur.UID, claim.UID)
		case sameSet(now, to):
			return nil // an earlier attempt was applied
		case !sameSet(now, from):
			changed = true
			return nil
		}
		cur.Status.IPs = ips
		// An update: it fails (and is retried) if the controller wrote the
		// status meanwhile (ownerPod, conditions).
		return r.c.cp.Client.Status().Update(ctx, &cur)
	})
	if err != nil {
		return
	}
	if changed {
		r.violate("I6", "claim-status-changed", fmt.Sprintf("IPAMClaim %s (uid %s) records %v; it recorded %s, and only the harness edits a filled claim's addresses",
			cs.name, claim.UID, now, formatAddrs(from)), cs.name)
		return
	}
	r.counts.inc("claim-edits")
	r.model.claimEdited(claim.UID, from, to)
	cs.ips = to
	if st.flag {
		r.startClaimPods(ctx, st.seq, cs, []int{st.node}, nil)
	}
}
