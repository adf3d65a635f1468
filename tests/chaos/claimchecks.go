// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The checks of IPAMClaims (I4, I6): ipkeeper-controller fills every
// claim (reserves, then records status.ips), keeps what it records
// reserved and releases what it no longer records; agents only read.

// The transient states of a claim that I4 allows (listed, not violations).
const (
	// reservations of a claim that records no addresses yet: made before
	// the status write, or a request's address reserved while the rest of
	// it cannot be (the controller rolls those back, best effort).
	stateReservedBeforeStatus = "reserved-before-status"
	// reservations of the claim beyond what it records: a create whose
	// answer was lost, so the controller chose another address; it
	// releases the extra one once its cache shows it.
	stateHoldsUnrecorded = "holds-unrecorded"
	// right after the harness's edit: the old addresses are still held
	// until the new ones are reserved (and a while after, until the
	// controller releases them).
	stateEditOldHeld = "edit-old-still-held"
	// as above, but someone else holds a new address: the controller
	// keeps the old one (IPsAllocated=False, IPAddressConflict) rather
	// than leave the claim with nothing. May remain at quiescence.
	stateEditConflict = "edit-conflict"
	// a claim that records nothing because its request is refused
	// (RequestedAddresses=False). May remain at quiescence, holding
	// nothing by then.
	stateRequestRefused = "request-refused"
)

// agentManager is the field manager of the agents' writes (the API
// server takes it from their user agent, "ipkeeper-agent/<version> (<node>)").
const agentManager = "ipkeeper-agent"

// claimView is one claim as a round of checks reads it.
type claimView struct {
	claim  *ipamclaimsv1alpha1.IPAMClaim
	status []netip.Addr // status.ips
	held   []netip.Addr // addresses of its reservations, not released
	names  []string     // those reservations' names
}

func viewClaim(ls *liveState, claim *ipamclaimsv1alpha1.IPAMClaim) claimView {
	v := claimView{claim: claim, status: claimIPs(claim.Status.IPs)}
	for _, res := range ls.res {
		if res.Spec.Owner.Kind != ipkv1alpha1.OwnerIPAMClaim || res.Spec.Owner.UID != claim.UID || res.Spec.Released() {
			continue
		}
		if ip, err := netip.ParseAddr(res.Spec.IP); err == nil {
			v.held = append(v.held, ip)
			v.names = append(v.names, res.Name)
		}
	}
	slices.Sort(v.names)
	return v
}

// refused returns the claim's RequestedAddresses=False condition, if any.
func refused(claim *ipamclaimsv1alpha1.IPAMClaim) *metav1.Condition {
	c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	return c
}

// addressState compares what a claim records with what it holds (I4):
// "" when they are equal, else the allowed transient state it is in, or
// a problem.
func addressState(ls *liveState, v claimView, facts claimFacts) (state, problem string) {
	switch {
	case len(v.status) == 0 && refused(v.claim) != nil:
		return stateRequestRefused, ""
	case len(v.status) == 0 && len(v.held) > 0:
		return stateReservedBeforeStatus, ""
	case len(v.status) == 0, sameSet(v.status, v.held):
		return "", ""
	}
	// After the harness's edit from -> to, the controller reserves each
	// new address, then releases the old ones: the claim holds from, then
	// from and part or all of to, then to and part of from. It may also
	// still hold addresses it records nowhere (a fill's create whose
	// answer was lost, retried with another address), as outside an edit
	// (stateHoldsUnrecorded): it releases them too, which quiescence
	// checks.
	if e := facts.edit; e != nil && sameSet(v.status, e.to) && (subset(e.from, v.held) || subset(e.to, v.held)) {
		for _, ip := range e.to {
			if slices.Contains(v.held, ip) {
				continue
			}
			if res := ls.res[naming.Reservation(networks[poolVM].key, ip)]; res != nil && (res.Spec.Owner.UID != v.claim.UID || res.Spec.Released()) {
				return stateEditConflict, ""
			}
		}
		return stateEditOldHeld, ""
	}
	if subset(v.status, v.held) {
		return stateHoldsUnrecorded, ""
	}
	return "", fmt.Sprintf("status.ips %v but its reservations hold %v", v.status, v.held)
}

// settled reports whether a claim is where ipkeeper-controller leaves it
// once nothing changes: it holds exactly what it records, or what is
// left is someone else's doing (a request refused, an edit's address
// held by another).
func settled(ls *liveState, v claimView, facts claimFacts) bool {
	state, problem := addressState(ls, v, facts)
	switch {
	case problem != "":
		return false
	case state == stateRequestRefused:
		return refusedAddressFree(ls, v.claim) == "" && len(v.held) == 0
	case len(v.status) == 0, macLabelProblem(v.claim) != "":
		return false
	}
	return state == "" || state == stateEditConflict || keptWhileRunning(v.claim, state)
}

// keptWhileRunning: an address a claim holds beyond what it records (left
// by an edit of status.ips, or unrecorded) stays while a pod of the claim
// exists, as ipkeeper-controller says with AddressesHeld: its guest may
// use it. It is released once no pod of the claim is left.
func keptWhileRunning(claim *ipamclaimsv1alpha1.IPAMClaim, state string) bool {
	return (state == stateHoldsUnrecorded || state == stateEditOldHeld) && heldWhileRunning(claim)
}

// heldWhileRunning reports whether ipkeeper-controller says the claim keeps
// addresses it no longer records because a pod of it runs.
func heldWhileRunning(claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	return meta.IsStatusConditionTrue(claim.Status.Conditions, claimstatus.ConditionHeld)
}

// macLabelProblem says how a live claim's MAC label (macaddr.Label,
// written by the controller's lane of its own after the fill) is not its
// MAC, "" when it is or the claim has none: the lane may lag, but not at
// quiescence.
func macLabelProblem(claim *ipamclaimsv1alpha1.IPAMClaim) string {
	if claim.DeletionTimestamp != nil {
		return ""
	}
	mac, _, ok := macaddr.OfClaim(claim)
	if !ok || claim.Labels[macaddr.Label] == macaddr.LabelValue(mac) {
		return ""
	}
	return fmt.Sprintf("its label %s is %q, not its MAC %s", macaddr.Label, claim.Labels[macaddr.Label], macaddr.LabelValue(mac))
}

// refusedAddressFree names the requested addresses of a claim refused
// as Taken when none of them is held by another ("" when one is): the
// controller must take them then.
func refusedAddressFree(ls *liveState, claim *ipamclaimsv1alpha1.IPAMClaim) string {
	c := refused(claim)
	if c == nil || c.Reason != claimstatus.ReasonRequestedTaken {
		return ""
	}
	requested := requestedOf(claim)
	for _, ip := range requested {
		res := ls.res[naming.Reservation(networks[poolVM].key, ip)]
		if res != nil && (res.Spec.Owner.UID != claim.UID || res.Spec.Released()) {
			return ""
		}
	}
	return formatAddrs(requested)
}

// requestedOf reads the addresses a claim asks for (the annotation the
// harness wrote: a JSON list).
func requestedOf(claim *ipamclaimsv1alpha1.IPAMClaim) []netip.Addr {
	var raw []string
	if err := json.Unmarshal([]byte(claim.Annotations[claimstatus.RequestedAnnotation]), &raw); err != nil {
		return nil
	}
	var out []netip.Addr
	for _, s := range raw {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// checkClaim checks one claim against I4 and I6, if no operation of the
// harness touched it between the snapshot of generations and now.
func (r *runner) checkClaim(ls *liveState, claim *ipamclaimsv1alpha1.IPAMClaim, gens func(string) (uint64, bool), final bool) {
	h := "claim/" + string(claim.UID)
	gen, ok := gens(h)
	if !ok {
		return
	}
	r.counts.inc("check:I4")
	r.counts.inc("check:I6")
	v := viewClaim(ls, claim)
	facts := r.model.claimFacts(claim.UID)
	liveAtts := r.model.liveOfHolder(h)
	uid := string(claim.UID)
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested); c != nil {
		r.counts.incOnce("requested:"+string(c.Status)+"/"+c.Reason, uid)
	}

	// I4: what it records, what it holds, what its pods got.
	state, problem := addressState(ls, v, facts)
	var problems []string
	if problem != "" {
		problems = append(problems, problem)
	}
	for _, a := range liveAtts {
		if ips := r.model.ipsOf(a); !sameSet(ips, v.status) {
			problems = append(problems, fmt.Sprintf("pod %s got %v", a.podName, ips))
		}
	}
	if final && (state == stateHoldsUnrecorded || state == stateEditOldHeld) && !keptWhileRunning(claim, state) {
		problems = append(problems, fmt.Sprintf("at quiescence it is still in state %s: status.ips %v, its reservations hold %v", state, v.status, v.held))
	}
	if final {
		if p := macLabelProblem(claim); p != "" {
			problems = append(problems, p)
		}
	}
	// A request is reserved exactly or not at all: a refused claim ends
	// up holding nothing.
	if final && state == stateRequestRefused && len(v.held) > 0 {
		problems = append(problems, fmt.Sprintf("its request is refused (%s) but at quiescence it holds %v", refused(claim).Reason, v.held))
	}

	// I6: its record changes only by the harness's edit; a request is
	// honoured; at quiescence it is filled unless refused, and a refused
	// claim's addresses are someone else's.
	var changed []string
	if rec := r.model.recordedOf(h, claim.UID, gen, v.status); rec != nil && !sameSet(rec, v.status) {
		changed = append(changed, fmt.Sprintf("records %v; it recorded %v and only the harness edits a filled claim's addresses", v.status, rec))
	}
	if len(facts.requested) > 0 && facts.edit == nil && len(v.status) > 0 {
		switch others := gaveOthers(claim); {
		case others && !facts.fallback:
			changed = append(changed, fmt.Sprintf("asked for %v, to wait for them, but got others: records %v", facts.requested, v.status))
		case others && subset(facts.requested, v.status):
			// A request is honoured whole or not at all. The other
			// addresses are picked as if none was requested, so one may
			// be a requested address that was free (seed 9090 asked for
			// 10.62.0.237, taken, and fd62::67, free: the claim got
			// 10.62.0.103 and fd62::67); all of them would be the
			// request honoured.
			changed = append(changed, fmt.Sprintf("asked for %v or other addresses, got others, but records all of them: %v", facts.requested, v.status))
		case !others && !subset(facts.requested, v.status):
			changed = append(changed, fmt.Sprintf("asked for %v but records %v", facts.requested, v.status))
		}
	}
	if final {
		switch {
		case len(v.status) == 0 && state != stateRequestRefused:
			changed = append(changed, fmt.Sprintf("records no addresses at quiescence and its request is not refused (conditions %s)", mustJSON(claim.Status.Conditions)))
		case state == stateRequestRefused:
			if ip := refusedAddressFree(ls, claim); ip != "" {
				changed = append(changed, fmt.Sprintf("is refused (%s) at quiescence although no one else holds the requested %s", refused(claim).Reason, ip))
			}
		}
	}

	if len(problems)+len(changed) == 0 {
		if state != "" {
			r.allowState(state, claim, v, final)
		}
		return
	}
	if g, q := r.model.holderQuiet(h); !q || g != gen {
		return
	}
	keys := append([]string{claim.Name}, v.names...)
	for _, a := range liveAtts {
		keys = append(keys, a.podName)
	}
	what := fmt.Sprintf("IPAMClaim %s/%s (uid %s)", claim.Namespace, claim.Name, claim.UID)
	if len(problems) > 0 {
		r.violate("I4", "claim-status", what+": "+strings.Join(problems, "; "), keys...)
	}
	if len(changed) > 0 {
		r.violate("I6", "claim-record", what+" "+strings.Join(changed, "; "), keys...)
	}
}

// allowState counts an allowed transient state once per claim and
// state, and lists those still there at quiescence.
func (r *runner) allowState(state string, claim *ipamclaimsv1alpha1.IPAMClaim, v claimView, final bool) {
	r.counts.incOnce("allowed:"+state, string(claim.UID))
	if final {
		r.allowed = append(r.allowed, fmt.Sprintf("IPAMClaim %s (uid %s) %s: status.ips %v, reservations %v, conditions %s",
			claim.Name, claim.UID, state, v.status, v.held, mustJSON(claim.Status.Conditions)))
	}
}

// checkWriters checks I6's writers: no agent writes a claim or a claim's
// reservation, and the claims-block label marks only claims' reservations
// (an IPAMClaim's or a Cluster API claim's: the controller's one
// allocator of claims serves both from its blocks).
func (r *runner) checkWriters(ls *liveState) {
	for i := range ls.claims {
		c := &ls.claims[i]
		r.counts.inc("check:I6-writers")
		if m := agentManaged(c.ManagedFields); m != "" {
			r.violate("I6", "agent-wrote-claim", fmt.Sprintf("IPAMClaim %s (uid %s) was written by an agent (field manager %s)", c.Name, c.UID, m), c.Name)
		}
	}
	for _, res := range ls.res {
		claimOwned := res.Spec.Owner.Kind == ipkv1alpha1.OwnerIPAMClaim || res.Spec.Owner.Kind == ipkv1alpha1.OwnerIPAddressClaim
		if !claimOwned && agentManaged(res.ManagedFields) != "" {
			// The agents' own writes carry agentManager: without them, the
			// check below would prove nothing (assertCoverage).
			r.counts.inc("agent-written-pod-reservations")
		}
		if !claimOwned && res.Labels[naming.ClaimsBlockLabel] == "" {
			continue
		}
		r.counts.inc("check:I6-writers")
		var problems []string
		if !claimOwned {
			problems = append(problems, fmt.Sprintf("is %s %s's but labelled %s", res.Spec.Owner.Kind, res.Spec.Owner.Name, naming.ClaimsBlockLabel))
		}
		if claimOwned && res.Spec.Node != "" {
			problems = append(problems, fmt.Sprintf("has spec.node %q", res.Spec.Node))
		}
		if m := agentManaged(res.ManagedFields); m != "" {
			problems = append(problems, "was written by an agent (field manager "+m+")")
		}
		if len(problems) > 0 {
			r.violate("I6", "agent-wrote-claim-reservation", fmt.Sprintf("reservation %s (%s of %s %s/%s uid %s) %s",
				res.Name, res.Spec.IP, res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, res.Spec.Owner.UID, strings.Join(problems, ", ")),
				res.Name, res.Spec.Owner.Name)
		}
	}
}

// checkBlocks checks, at quiescence, that no agent took or wrote a block
// of IPAMClaims (I6).
func (r *runner) checkBlocks(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var list ipkv1alpha1.IPBlockList
	if err := r.c.cp.Client.List(ctx, &list); err != nil {
		r.harnessError(fmt.Errorf("listing IPBlocks at quiescence: %w", err))
		return
	}
	for _, b := range list.Items {
		if b.Spec.Holder != ipkv1alpha1.HolderIPAMClaims {
			continue
		}
		r.counts.inc("check:I6-writers")
		if m := agentManaged(b.ManagedFields); m != "" || b.Spec.Node != "" {
			r.violate("I6", "agent-wrote-claims-block", fmt.Sprintf("IPBlock %s (%s, holder %s) has spec.node %q, field managers %s",
				b.Name, b.Spec.CIDR, b.Spec.Holder, b.Spec.Node, managers(b.ManagedFields)), b.Name)
		}
	}
}

// agentManaged returns the agent's field manager if it wrote the object.
func agentManaged(fields []metav1.ManagedFieldsEntry) string {
	for _, f := range fields {
		if strings.HasPrefix(f.Manager, agentManager) {
			return f.Manager
		}
	}
	return ""
}

func managers(fields []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, f := range fields {
		out = append(out, f.Manager+"/"+string(f.Operation)+"/"+f.Subresource)
	}
	return strings.Join(out, ",")
}

// claimsSettled reports whether every claim is settled.
func (r *runner) claimsSettled(ls *liveState) bool {
	for i := range ls.claims {
		c := &ls.claims[i]
		if !settled(ls, viewClaim(ls, c), r.model.claimFacts(c.UID)) {
			return false
		}
	}
	return true
}

// subset reports whether every address of a is in b.
func subset(a, b []netip.Addr) bool {
	for _, ip := range a {
		if !slices.Contains(b, ip) {
			return false
		}
	}
	return true
}

// gaveOthers reports whether ipkeeper-controller gave a claim other
// addresses than it requested because one was held
// (claimstatus.ReasonRequestedTakenOthersGiven).
func gaveOthers(claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested)
	return c != nil && c.Reason == claimstatus.ReasonRequestedTakenOthersGiven
}
