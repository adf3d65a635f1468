// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// EventReason is the reason of an Event on a claim or on its VM.
type EventReason string

// The Event reasons, listed in docs/troubleshooting.md.
const (
	// On the claim: its addresses recorded, or why not (IPsAllocated).
	ReasonIPsAllocated    EventReason = "IPsAllocated"
	ReasonIPsNotAllocated EventReason = "IPsNotAllocated"
	// On the claim's VM (or standalone VMI): requested addresses reserved
	// for the claim, or not, with the RequestedAddresses condition's reason.
	ReasonRequestedReserved    EventReason = "RequestedAddressesReserved"
	ReasonRequestedNotHonoured EventReason = "RequestedAddressesNotHonoured"
	// On the claim and its VM: addresses status.ips no longer records (an
	// administrator's edit) kept while a pod of the claim runs
	// (AddressesHeld), and released once none does.
	ReasonAddressesHeld      EventReason = "AddressesHeldWhileRunning"
	ReasonHeldAddressesFreed EventReason = "HeldAddressesReleased"
)

// record writes what a look at the claim found into its status (one
// write, only when something changed) and tells of changes in Events:
// status.ips of a claim that had none, IPsAllocated, RequestedAddresses
// and ownerPod (the newest pod that references the claim).
func (r *Reconciler) record(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network, out outcome) error {
	updated := claim.DeepCopy()
	st := &updated.Status
	changed := false
	if len(out.ips) > 0 && !claimstatus.Filled(claim) {
		changed = claimstatus.Record(st, out.ips...)
	}
	var allocated metav1.Condition
	switch {
	case out.failure != nil:
		allocated = claimstatus.NotAllocated(out.failure.reason, out.failure.message, claim.Generation)
	case net != nil:
		allocated = claimstatus.Allocated(st, net.cfg.Name, "", claim.Generation)
	default:
		allocated = metav1.Condition{Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonAllocated, ObservedGeneration: claim.Generation}
	}
	wasAllocated := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionIPsAllocated)
	if out.failure != nil || len(st.IPs) > 0 {
		changed = meta.SetStatusCondition(&st.Conditions, allocated) || changed
	}
	wasHeld := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionHeld)
	switch {
	case out.settled && len(out.held) > 0:
		changed = meta.SetStatusCondition(&st.Conditions, heldCondition(st, out, claim.Generation)) || changed
	case out.settled:
		changed = meta.RemoveStatusCondition(&st.Conditions, claimstatus.ConditionHeld) || changed
	}
	wasRequested := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested)
	switch {
	case out.requested != nil:
		out.requested.ObservedGeneration = claim.Generation
		changed = meta.SetStatusCondition(&st.Conditions, *out.requested) || changed
	case wasRequested != nil && len(st.IPs) == 0:
		// The request was withdrawn before the first allocation.
		changed = meta.RemoveStatusCondition(&st.Conditions, claimstatus.ConditionRequested) || changed
	}
	if pod, err := r.ownerPod(ctx, claim); err != nil {
		return err
	} else if pod != "" && (st.OwnerPod == nil || st.OwnerPod.Name != pod) {
		st.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: pod}
		changed = true
	}
	if !changed {
		return nil
	}
	if err := claimstatus.Write(ctx, r.Client, updated); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	r.writes.wrote(claim, updated)
	if !claimstatus.Filled(claim) && claimstatus.Filled(updated) {
		fills.Inc()
		log.FromContext(ctx).Info("recorded the claim's addresses", "claim", claim.Namespace+"/"+claim.Name, "ips", st.IPs)
	}
	r.tell(claim, updated, wasAllocated, wasRequested, out.failure != nil && out.failure.waiting)
	r.tellHeld(claim, updated, wasHeld)
	return nil
}

// heldCondition is the AddressesHeld condition of a claim keeping
// addresses its status.ips no longer records while a pod of it runs.
func heldCondition(st *ipamclaimsv1alpha1.IPAMClaimStatus, out outcome, generation int64) metav1.Condition {
	ips := make([]string, len(out.held))
	for i, ip := range out.held {
		ips[i] = ip.String()
	}
	return metav1.Condition{Type: claimstatus.ConditionHeld, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonPodRunning, ObservedGeneration: generation,
		Message: fmt.Sprintf("status.ips does not record %s, but pod %s, which uses the claim, still runs and its guest may still use it: "+
			"ipkeeper-controller keeps it reserved for the claim until no pod of the claim runs, then releases it; the claim's next launcher gets status.ips (%s). "+
			"Stop the VM to apply the edit, or write the address back into status.ips to keep it",
			strings.Join(ips, ", "), out.heldFor, strings.Join(st.IPs, ", "))}
}

// tellHeld records the Events of the AddressesHeld condition: a Warning
// on the claim and its VM when addresses are held (or what is held
// changes), a Normal one when they are released.
func (r *Reconciler) tellHeld(claim, updated *ipamclaimsv1alpha1.IPAMClaim, was *metav1.Condition) {
	now := meta.FindStatusCondition(updated.Status.Conditions, claimstatus.ConditionHeld)
	owner := ownerObject(claim)
	event := func(typ string, reason EventReason, message string) {
		r.Recorder.Event(updated, typ, string(reason), message)
		if owner != nil {
			r.Recorder.Eventf(owner, typ, string(reason), "IPAMClaim %s: %s", claim.Name, message)
		}
	}
	switch {
	case now != nil && (was == nil || was.Message != now.Message):
		event(corev1.EventTypeWarning, ReasonAddressesHeld, now.Message)
	case now == nil && was != nil:
		event(corev1.EventTypeNormal, ReasonHeldAddressesFreed, "released the addresses status.ips does not record, held while a pod of the claim ran: none runs any more")
	}
}

// tell records Events for condition changes: IPsAllocated on the claim
// (failures, and the recovery from one) and its failures that need
// someone on the claim's VM too, RequestedAddresses on the claim's VM,
// where whoever asked looks. A failure that passes by itself
// (waiting) is told as Normal: whoever alerts on Warnings has nothing to do.
func (r *Reconciler) tell(claim, updated *ipamclaimsv1alpha1.IPAMClaim, wasAllocated, wasRequested *metav1.Condition, waiting bool) {
	failed := corev1.EventTypeWarning
	if waiting {
		failed = corev1.EventTypeNormal
	}
	changedCond := func(was *metav1.Condition, typ string) *metav1.Condition {
		now := meta.FindStatusCondition(updated.Status.Conditions, typ)
		if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason && was.Message == now.Message) {
			return nil
		}
		return now
	}
	if c := changedCond(wasAllocated, claimstatus.ConditionIPsAllocated); c != nil {
		// A first fill says so in the condition only: an Event per VM
		// created is a write per VM in a boot storm. A recovery is told,
		// as the Warning before it was.
		if c.Status == metav1.ConditionTrue {
			if wasAllocated != nil && wasAllocated.Status == metav1.ConditionFalse {
				r.Recorder.Event(updated, corev1.EventTypeNormal, string(ReasonIPsAllocated), c.Message)
			}
		} else {
			r.Recorder.Eventf(updated, failed, string(ReasonIPsNotAllocated), "%s: %s", c.Reason, c.Message)
			// A VM's owner looks at the VM, whose launcher waits for
			// the claim: a failure that needs someone is told there too.
			if owner := ownerObject(claim); owner != nil && !waiting {
				r.Recorder.Eventf(owner, failed, string(ReasonIPsNotAllocated), "IPAMClaim %s: %s: %s", claim.Name, c.Reason, c.Message)
			}
		}
	}
	c := changedCond(wasRequested, claimstatus.ConditionRequested)
	owner := ownerObject(claim)
	if c == nil || owner == nil {
		return
	}
	if c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(owner, corev1.EventTypeNormal, string(ReasonRequestedReserved), "IPAMClaim %s: %s", claim.Name, c.Message)
	} else {
		r.Recorder.Eventf(owner, failed, string(ReasonRequestedNotHonoured), "IPAMClaim %s (%s): %s", claim.Name, c.Reason, c.Message)
	}
}

// ownerObject is the claim's VM or VMI, for Events (nil for claims no VM
// or VMI owns).
func ownerObject(claim *ipamclaimsv1alpha1.IPAMClaim) client.Object {
	owner, ok := claimowner.Of(claim)
	if !ok {
		return nil
	}
	var o client.Object = &kubevirtv1.VirtualMachine{}
	if owner.Kind == claimowner.KindVMI {
		o = &kubevirtv1.VirtualMachineInstance{}
	}
	o.SetNamespace(claim.Namespace)
	o.SetName(owner.Name)
	o.SetUID(owner.UID)
	return o
}

// ownerPod names the newest pod (not being deleted) that references the
// claim in its networks annotation and launches a VMI of the claim's owner
// (the pods the agent lets use the claim): the launcher that runs the VM
// now, or the target of a live migration from when it is created; "" when
// none.
// Creation times have one-second resolution, and a migration's target is
// often created in its source's second: there the pod KubeVirt labels with
// a migration is the newer.
func (r *Reconciler) ownerPod(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (string, error) {
	pods, err := podrefs.Referencing(ctx, r.Client, claim.Namespace, claim.Name)
	if err != nil {
		return "", err
	}
	owner, owned := claimowner.Of(claim)
	live := slices.DeleteFunc(pods, func(p metav1.PartialObjectMetadata) bool {
		// A pod that only names the claim (the agent refuses it the
		// claim) is no owner of it.
		return p.DeletionTimestamp != nil || (owned && !owner.RunsPod(&p))
	})
	if len(live) == 0 {
		return "", nil
	}
	newest := slices.MaxFunc(live, func(a, b metav1.PartialObjectMetadata) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := compareBool(isMigrationTarget(a), isMigrationTarget(b)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return newest.Name, nil
}

func isMigrationTarget(p metav1.PartialObjectMetadata) bool {
	_, ok := p.Labels[kubevirtv1.MigrationJobLabel]
	return ok
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func rangeList(ranges []iprange.Range) string {
	s := make([]string, len(ranges))
	for i, r := range ranges {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
