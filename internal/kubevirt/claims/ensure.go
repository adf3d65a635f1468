// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
)

// EventReason is the reason of an Event on the VM (or standalone VMI).
type EventReason string

// The Event reasons, listed in docs/troubleshooting.md.
const (
	ReasonClaimCreated  EventReason = "IPAMClaimCreated"
	ReasonClaimDeleted  EventReason = "IPAMClaimDeleted"
	ReasonClaimConflict EventReason = "IPAMClaimConflict"
	ReasonClaimMismatch EventReason = "IPAMClaimSpecMismatch"
	ReasonNADProblem    EventReason = "NetworkAttachmentDefinitionProblem"
	// The VM's requested addresses (RequestedAddressesAnnotation) cannot
	// be read, or name a network the VM does not have (a typo); what
	// becomes of a readable request ipkeeper-controller's claim address
	// controller says (package claimaddrs).
	ReasonRequestInvalid EventReason = "RequestedAddressesInvalid"
)

// claimWriter creates an owner's missing claims; the VM and VMI reconcilers share it.
type claimWriter struct {
	client   client.Client
	recorder record.EventRecorder
}

// ensureResult says what is still pending after ensure.
type ensureResult struct {
	// conflicts are claims of the wanted names held by another owner.
	conflicts int
	// waiting counts our own claims still being deleted (an unplug undone
	// quickly): they are recreated once gone.
	waiting int
}

// ensure creates every wanted claim that does not exist yet, adopts ours
// that lack our labels or finalizer, and reports (with an event on the
// owner) claims of the same name that belong to someone else.
func (w *claimWriter) ensure(ctx context.Context, ownerObj client.Object, owner claimowner.Owner, want []Desired) (ensureResult, error) {
	var res ensureResult
	for _, d := range want {
		var claim ipamclaimsv1alpha1.IPAMClaim
		err := w.client.Get(ctx, types.NamespacedName{Namespace: ownerObj.GetNamespace(), Name: d.Name}, &claim)
		switch {
		case apierrors.IsNotFound(err):
			if err := w.create(ctx, ownerObj, owner, d); err != nil {
				return res, err
			}
			continue
		case err != nil:
			return res, fmt.Errorf("reading IPAMClaim %s/%s: %w", ownerObj.GetNamespace(), d.Name, err)
		}
		held, ok := claimowner.Of(&claim)
		if !ok || held.UID != owner.UID || !sameNetwork(&claim, d) {
			res.conflicts++
			claimConflicts.Inc()
			who := "an object ipkeeper does not manage"
			if ok {
				who = held.String()
			}
			w.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonClaimConflict),
				"IPAMClaim %s/%s for network %q belongs to %s; waiting for it to be released before this %s can have persistent IPs on that network",
				claim.Namespace, claim.Name, d.LogicalNetwork, who, owner.Kind)
			continue
		}
		if claim.DeletionTimestamp != nil {
			res.waiting++
			continue
		}
		// A claim another controller made may have no interface
		// (ipam-extensions sets none); only a different one is a mismatch.
		if claim.Spec.Network != d.Network || (claim.Spec.Interface != "" && claim.Spec.Interface != d.Interface) {
			// The claim spec is what the IPAM allocated for; rewriting it
			// would not move the addresses, so it is reported, not changed.
			w.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonClaimMismatch),
				"IPAMClaim %s/%s has network %q interface %q, but network %q now wants network %q interface %q; delete the claim to re-create it (the VM gets new addresses)",
				claim.Namespace, claim.Name, claim.Spec.Network, claim.Spec.Interface, d.LogicalNetwork, d.Network, d.Interface)
		}
		if err := w.adopt(ctx, &claim, owner, d); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (w *claimWriter) create(ctx context.Context, ownerObj client.Object, owner claimowner.Owner, d Desired) error {
	gvk := kubevirtv1.SchemeGroupVersion.WithKind(owner.Kind)
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       ownerObj.GetNamespace(),
			Name:            d.Name,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ownerObj, gvk)},
			Finalizers:      []string{Finalizer},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: d.Network, Interface: d.Interface},
	}
	setIdentity(claim, owner, d)
	// With the claim, in one write, so that ipkeeper-controller reserves
	// the requested addresses, never others, when it fills the claim.
	setRequest(claim, d)
	setRetention(claim, d)
	if d.Receiver {
		// Only at its creation: from then on package handover decides.
		claim.Annotations[claimstatus.ReceiverAnnotation] = claimstatus.ReceiverWaiting
	}
	if err := w.client.Create(ctx, claim); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Our cache has not seen it yet; the claim watch brings us back.
			return fmt.Errorf("IPAMClaim %s/%s appeared while creating it (cache behind): %w", claim.Namespace, claim.Name, err)
		}
		return fmt.Errorf("creating IPAMClaim %s/%s for %s network %q: %w", claim.Namespace, claim.Name, owner, d.LogicalNetwork, err)
	}
	claimsCreated.Inc()
	log.FromContext(ctx).Info("created IPAMClaim", "claim", claim.Name, "network", d.LogicalNetwork, "cniNetwork", d.Network, "interface", d.Interface)
	w.recorder.Eventf(ownerObj, corev1.EventTypeNormal, string(ReasonClaimCreated),
		"created IPAMClaim %s for network %q (CNI network %q, pod interface %s)", claim.Name, d.LogicalNetwork, d.Network, d.Interface)
	return nil
}

// adopt adds our labels, annotations and finalizer to a claim this owner
// already holds (for example one made by another KubeVirt IPAM controller).
func (w *claimWriter) adopt(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, owner claimowner.Owner, d Desired) error {
	if controllerutil.ContainsFinalizer(claim, Finalizer) && claimowner.Managed(claim) &&
		claim.Labels[claimowner.OwnerUIDLabel] == string(owner.UID) && claim.Annotations[NetworkAnnotation] == d.LogicalNetwork &&
		claim.Annotations[claimstatus.NADAnnotation] == d.NAD.String() &&
		(claimstatus.Filled(claim) || requestRecorded(claim, d)) && retentionRecorded(claim, d) &&
		claim.Annotations[macaddr.OwnAnnotation] == d.OwnMAC {
		return nil
	}
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(claim, Finalizer)
	setIdentity(claim, owner, d)
	// Unlike a request, the retention may change at any time: it is
	// applied when the claim is released.
	setRetention(claim, d)
	if !claimstatus.Filled(claim) {
		// A request added (or withdrawn) before the first allocation; after
		// it the addresses are the claim's and the request is only judged.
		setRequest(claim, d)
	}
	if err := w.client.Patch(ctx, claim, patch); err != nil {
		return fmt.Errorf("adopting IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

// setIdentity records on the claim its owner, its KubeVirt network, the
// NAD its addresses come from (claimstatus.NADAnnotation) and the MAC its
// interface sets itself (macaddr.OwnAnnotation), which may change at any
// time (a VM edited, applied at its next start).
func setIdentity(claim *ipamclaimsv1alpha1.IPAMClaim, owner claimowner.Owner, d Desired) {
	claimowner.Record(claim, owner)
	claim.Annotations[NetworkAnnotation] = d.LogicalNetwork
	claim.Annotations[claimstatus.NADAnnotation] = d.NAD.String()
	if d.OwnMAC != "" {
		claim.Annotations[macaddr.OwnAnnotation] = d.OwnMAC
	} else {
		delete(claim.Annotations, macaddr.OwnAnnotation)
	}
}

// setRequest records d's requested addresses on the claim
// (claimstatus.RequestedAnnotation), or removes a withdrawn request.
// With it, the request's fallback (claimstatus.RequestedFallbackAnnotation),
// recorded only when it is not the default.
func setRequest(claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) {
	if d.Request == nil {
		delete(claim.Annotations, claimstatus.RequestedAnnotation)
		delete(claim.Annotations, claimstatus.RequestedFallbackAnnotation)
		return
	}
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[claimstatus.RequestedAnnotation] = d.Request.claimValue()
	if f := d.Request.fallback; f != "" && f != claimstatus.FallbackWait {
		claim.Annotations[claimstatus.RequestedFallbackAnnotation] = f
	} else {
		delete(claim.Annotations, claimstatus.RequestedFallbackAnnotation)
	}
}

// requestRecorded reports whether the claim records d's request as it is.
func requestRecorded(claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) bool {
	v, ok := claim.Annotations[claimstatus.RequestedAnnotation]
	f, fok := claim.Annotations[claimstatus.RequestedFallbackAnnotation]
	if d.Request == nil {
		return !ok && !fok
	}
	wantF := d.Request.fallback
	if wantF == claimstatus.FallbackWait {
		wantF = ""
	}
	return ok && v == d.Request.claimValue() && f == wantF && fok == (wantF != "")
}

// sameNetwork tells a claim of the wanted name apart from one this owner
// holds for a different logical network (possible through a hash
// collision of ipkeeper's names, or ipam-extensions' lossy names; then it
// must not be shared).
func sameNetwork(claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) bool {
	logical, ok := claim.Annotations[NetworkAnnotation]
	if !ok {
		// Claims made by other tools carry no annotation; their interface
		// name is derived from the logical network just the same. One
		// with no interface (ipam-extensions') is matched by its network.
		if claim.Spec.Interface == "" {
			return claim.Spec.Network == d.Network
		}
		return claim.Spec.Interface == d.Interface
	}
	return logical == d.LogicalNetwork
}
