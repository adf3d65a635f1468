// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The IPsAllocated condition ipkeeper-controller writes on claims
// (internal/controller/claimaddrs, OVN-Kubernetes' type and reasons).
const (
	conditionIPsAllocated = claimstatus.ConditionIPsAllocated
	reasonExhausted       = claimstatus.ReasonExhausted
	reasonConflict        = claimstatus.ReasonConflict
)

func whyClaim(ctx context.Context, s *session, key types.NamespacedName) (*Report, error) {
	claim, err := getClaim(ctx, s.client, key)
	if err != nil {
		return nil, err
	}
	if claim == nil {
		return nil, &notFoundError{fmt.Sprintf("IPAMClaim %s not found", key)}
	}
	now := s.now()
	f := &ClaimReport{ClaimFact: claimFact(claim), Namespace: key.Namespace, UID: claim.UID}
	if err := claimOwner(ctx, s, claim, f); err != nil {
		return nil, err
	}
	all, err := listReservations(ctx, s.client, key.Namespace)
	if err != nil {
		return nil, err
	}
	held := ownedBy(all, ipkeeperv1alpha1.OwnerIPAMClaim, claim.UID)
	f.Reservations = reservationFacts(held, now)
	events, err := eventsOf(ctx, s.client, key.Namespace, "IPAMClaim", key.Name, claim.UID)
	if err != nil {
		return nil, err
	}
	f.Events = eventLines(events, 5, now)
	rep := &Report{Object: fmt.Sprintf("IPAMClaim %s (uid %s)", key, claim.UID), Claim: f}
	claimNext(rep, claim, held)
	if len(rep.Next) == 0 {
		rep.next("nothing to do: the claim holds %s", strings.Join(claim.Status.IPs, ", "))
	}
	renderClaim(rep, now)
	return rep, nil
}

// ClaimReport is what why ipamclaim found, typed; the report's sections
// are rendered from it (renderClaim).
type ClaimReport struct {
	ClaimFact
	Namespace string    `json:"namespace"`
	UID       types.UID `json:"uid"`
	// Owner is the VM or VMI that owns the claim, "" for none; Orphaned
	// when only the claim's labels record it.
	Owner        string            `json:"owner,omitempty"`
	Orphaned     bool              `json:"orphaned,omitempty"`
	OwnerExists  bool              `json:"ownerExists"`
	Reservations []ReservationFact `json:"reservations"`
	Events       []string          `json:"events"`
}

// claimOwner finds the claim's VM or VMI and whether it still exists.
func claimOwner(ctx context.Context, s *session, claim *ipamclaimsv1alpha1.IPAMClaim, f *ClaimReport) error {
	owner, owned := claimowner.Of(claim)
	if !owned {
		return nil
	}
	exists, err := ownerVMExists(ctx, s.client, claim.Namespace, owner)
	if err != nil {
		return err
	}
	f.Owner, f.Orphaned, f.OwnerExists = owner.String(), owner.Orphaned, exists
	return nil
}

// renderClaim adds the sections of rep.Claim to rep.
func renderClaim(rep *Report, now time.Time) {
	f := rep.Claim
	rep.add("Claim", f.lines()...)
	line := "no VirtualMachine or VirtualMachineInstance owns it (a claim made by another tool: any pod of the namespace may use it)"
	if f.Owner != "" {
		line = f.Owner
		if f.Orphaned {
			line += " (recorded in the claim's labels: the owner reference is gone)"
		}
		if !f.OwnerExists {
			line += "; it no longer exists"
		}
	}
	rep.add("Owner", line)
	rep.add("Reservations", factLines(f.Reservations, now)...)
	rep.add("Events", f.Events...)
}

// getClaim reads a claim; nil when it does not exist (or the IPAMClaim
// CRD is not installed).
func getClaim(ctx context.Context, c client.Reader, key types.NamespacedName) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	err := c.Get(ctx, key, &claim)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading IPAMClaim %s: %w", key, err)
	}
	return &claim, nil
}

// ownerVMExists reports whether the claim's VM or VMI (that UID) exists.
func ownerVMExists(ctx context.Context, c client.Reader, namespace string, owner claimowner.Owner) (bool, error) {
	var obj client.Object = &kubevirtv1.VirtualMachine{}
	if owner.Kind == claimowner.KindVMI {
		obj = &kubevirtv1.VirtualMachineInstance{}
	}
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: owner.Name}, obj)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s %s/%s: %w", owner.Kind, namespace, owner.Name, err)
	}
	return obj.GetUID() == owner.UID, nil
}

// ClaimFact is an IPAMClaim as why reports state it; its lines (the
// text) are rendered from it.
type ClaimFact struct {
	Name      string `json:"name"`
	Network   string `json:"network"`
	Interface string `json:"interface,omitempty"`
	// MadeBy is the controller that made (and releases) the claim.
	MadeBy string `json:"madeBy"`
	// VMNetwork is the VM network the claim is for (its annotation).
	VMNetwork string `json:"vmNetwork,omitempty"`
	// IPs are status.ips.
	IPs []string `json:"ips,omitempty"`
	// MAC is the interface's MAC: the VM's own (OwnMAC), else derived
	// from the addresses.
	MAC        string             `json:"mac,omitempty"`
	OwnMAC     bool               `json:"ownMAC,omitempty"`
	OwnerPod   string             `json:"ownerPod,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Retention is the retention annotation, when set.
	Retention *string `json:"retention,omitempty"`
	// Deleted is the deletion timestamp, with the finalizers that hold it.
	Deleted    *time.Time `json:"deleted,omitempty"`
	Finalizers []string   `json:"finalizers,omitempty"`
}

// claimFact reads the facts of a claim's spec and status.
func claimFact(claim *ipamclaimsv1alpha1.IPAMClaim) ClaimFact {
	f := ClaimFact{
		Name: claim.Name, Network: claim.Spec.Network, Interface: claim.Spec.Interface, MadeBy: claimMaker(claim),
		VMNetwork: claim.Annotations[claims.NetworkAnnotation], Conditions: claim.Status.Conditions,
	}
	if claimstatus.Filled(claim) {
		f.IPs = claim.Status.IPs
	}
	if mac, own, ok := macaddr.OfClaim(claim); ok {
		f.MAC, f.OwnMAC = mac.String(), own
	}
	if claim.Status.OwnerPod != nil {
		f.OwnerPod = claim.Status.OwnerPod.Name
	}
	if v, ok := claim.Annotations[claimstatus.RetentionAnnotation]; ok {
		f.Retention = &v
	}
	if claim.DeletionTimestamp != nil {
		t := claim.DeletionTimestamp.Time
		f.Deleted, f.Finalizers = &t, claim.Finalizers
	}
	return f
}

// lines renders the facts as the report's text says them.
func (f ClaimFact) lines() []string {
	lines := []string{fmt.Sprintf("network %q, interface %s", f.Network, orNone(f.Interface)), "made by " + f.MadeBy}
	if f.VMNetwork != "" {
		lines = append(lines, fmt.Sprintf("VM network %q", f.VMNetwork))
	}
	ips := "none"
	if len(f.IPs) > 0 {
		ips = strings.Join(f.IPs, ", ")
	}
	lines = append(lines, "status.ips: "+ips)
	switch {
	case f.MAC != "" && f.OwnMAC:
		lines = append(lines, fmt.Sprintf("MAC: %s (the VM's own macAddress)", f.MAC))
	case f.MAC != "":
		lines = append(lines, fmt.Sprintf("MAC: %s (from its address; launchers get it unless the VM sets its own)", f.MAC))
	}
	if f.OwnerPod != "" {
		lines = append(lines, "status.ownerPod: "+f.OwnerPod)
	}
	for _, c := range f.Conditions {
		lines = append(lines, conditionLine(c))
	}
	if f.Retention != nil {
		lines = append(lines, retentionLine(*f.Retention))
	}
	if f.Deleted != nil {
		lines = append(lines, fmt.Sprintf("being deleted since %s, finalizers %s", f.Deleted.UTC().Format("2006-01-02T15:04:05Z"), strings.Join(f.Finalizers, ",")))
	}
	return lines
}

// retentionLine says what a claim's retention (claimstatus.RetentionAnnotation)
// does.
func retentionLine(v string) string {
	if _, err := claimstatus.ParseRetention(v); err != nil {
		return err.Error() + ": ipkeeper-controller keeps nothing for it"
	}
	return fmt.Sprintf("%s %s: once released, its addresses are kept that long (or for their pool's reuseCooldown, if longer) for a claim of the same name: the VM made again, restored, or the network plugged back",
		claimstatus.RetentionAnnotation, v)
}

// claimMaker says which controller made (and releases) a claim: ipkeeper's
// label, else another controller's (ipam-extensions' claims carry the
// finalizer kubevirt.io/persistent-ipam and the label kubevirt.io/vm).
func claimMaker(claim *ipamclaimsv1alpha1.IPAMClaim) string {
	switch {
	case claimowner.Managed(claim):
		return "ipkeeper-controller"
	case claim.Labels[kubevirtv1.VirtualMachineLabel] != "" && controllerutil.ContainsFinalizer(claim, claims.Finalizer):
		return "another IPAMClaims controller (ipam-extensions' label " + kubevirtv1.VirtualMachineLabel + " and finalizer; ipkeeper-controller --claims-controller decides who makes claims)"
	}
	return "another tool (no ipkeeper-controller label)"
}

func conditionLine(c metav1.Condition) string {
	line := fmt.Sprintf("condition %s=%s %s", c.Type, c.Status, c.Reason)
	if c.Message != "" {
		line += ": " + c.Message
	}
	return line
}

// claimNext adds what to do for the documented states of a claim
// (docs/troubleshooting.md, docs/kubevirt.md).
func claimNext(rep *Report, claim *ipamclaimsv1alpha1.IPAMClaim, held []ipkeeperv1alpha1.IPReservation) {
	name := claim.Namespace + "/" + claim.Name
	switch {
	case claim.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(claim, claims.Finalizer) && controllerutil.ContainsFinalizer(claim, claims.RetentionFinalizer):
		rep.next("IPAMClaim %s is released, and waits for ipkeeper-controller to keep its addresses for its retention (finalizer %s): check that ipkeeper-controller runs", name, claims.RetentionFinalizer)
		return
	case claim.DeletionTimestamp != nil:
		rep.next("IPAMClaim %s is being released: it keeps its addresses until no VMI or launcher pod uses it (finalizer %s)", name, claims.Finalizer)
		return
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, conditionIPsAllocated); c != nil && c.Status == metav1.ConditionFalse {
		switch c.Reason {
		case reasonExhausted:
			rep.next("the pool of network %q is exhausted: grow it (add a range, widen range_start/range_end, drop excludes) or free leaked reservations (kubectl ipkeeper leaks); see kubectl ipkeeper pools", claim.Spec.Network)
		case reasonConflict:
			rep.next("an address of IPAMClaim %s is held by someone else (see the condition): free that address (kubectl ipkeeper who-has IP), or delete the claim so the VM gets new addresses", name)
		case claimstatus.ReasonOutsidePool:
			rep.next("IPAMClaim %s records or requests an address its network does not hand out (%s): fix the claim's status.ips or its requested addresses, or the pool; nothing was released", name, c.Message)
		case claimstatus.ReasonInvalid:
			rep.next("what IPAMClaim %s says cannot be read (%s): fix the claim, or delete it so the VM gets a new one", name, c.Message)
		case claimstatus.ReasonNADNotFound:
			rep.next("the NetworkAttachmentDefinition of IPAMClaim %s is gone (%s): create the NetworkAttachmentDefinition again, or delete the claim", name, c.Message)
		case claimstatus.ReasonNADInvalid:
			rep.next("the NetworkAttachmentDefinitions of network %q cannot serve IPAMClaim %s (%s): fix the NetworkAttachmentDefinition", claim.Spec.Network, name, c.Message)
		case claimstatus.ReasonPoolNotFound:
			rep.next("the IPPool of network %q does not exist (%s): create it if it is a named pool; an inline network's is made by ipkeeper-controller, and its NADs' events say why it has not (kubectl describe ippool, kubectl describe network-attachment-definition)", claim.Spec.Network, c.Message)
		case claimstatus.ReasonPoolInvalid:
			rep.next("the IPPool of network %q cannot be read (%s): fix the IPPool", claim.Spec.Network, c.Message)
		case claimstatus.ReasonNotAdmitted:
			rep.next("the IPPool of network %q does not admit namespace %s (%s): label the namespace, or change the pool's spec.namespaceSelector", claim.Spec.Network, claim.Namespace, c.Message)
		case claimstatus.ReasonQuotaExceeded:
			rep.next("namespace %s holds as many addresses of the pool of network %q as its spec.maxAddressesPerNamespace allows (%s): free some (deleted VMs' retained addresses count until their retention ends; kubectl get ipreservations -o wide lists them), or ask for a larger quota; see kubectl ipkeeper pools -o wide",
				claim.Namespace, claim.Spec.Network, c.Message)
		default:
			rep.next("ipkeeper-controller could not give IPAMClaim %s its addresses (%s): the condition says why; it retries, and at once when the pool, the NAD or the claim changes", name, c.Reason)
		}
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionInPool); c != nil && c.Status == metav1.ConditionFalse {
		rep.next("IPAMClaim %s holds addresses its pool no longer hands out: put the range back, or delete the claim (the VM then gets new addresses)", name)
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested); c != nil && c.Status == metav1.ConditionFalse {
		switch {
		case c.Reason == claimstatus.ReasonRequestedTakenOthersGiven:
			rep.next("IPAMClaim %s got other addresses than it requested, as its %s asks (set for a VM KubeVirt cloned or restored: its source still held them): %s. To get the requested ones, free them, then delete the claim while the VM is stopped",
				name, claimstatus.RequestedFallbackAnnotation, c.Message)
		case !claimstatus.Filled(claim):
			rep.next("the addresses IPAMClaim %s requests are not its yet (%s: %s): ipkeeper-controller gives it no others; fix that, or drop the request", name, c.Reason, c.Message)
		}
	}
	if !claimstatus.Filled(claim) && len(rep.Next) == 0 {
		rep.next("IPAMClaim %s has no addresses yet: ipkeeper-controller records them as soon as it sees the claim; if this lasts, is ipkeeper-controller running, and is the claim's network one of ipkeeper's (a NetworkAttachmentDefinition with ipam.type ipkeeper, and its IPPool)?", name)
		return
	}
	have := map[string]bool{}
	for _, r := range held {
		have[r.Spec.IP] = true
	}
	for _, addr := range claimstatus.Addresses(claim) {
		ip := addr.String()
		if !have[ip] {
			rep.next("status.ips lists %s but no reservation of the claim holds it: ipkeeper-controller reserves it again (IPsAllocated=False, IPAddressConflict, if someone else took it); launcher pods fail until it does", ip)
		}
	}
}
