// SPDX-License-Identifier: Apache-2.0

// What the commands share about reservations and their owners: listing
// them, whether an owner still exists, the VM behind a claim, and the
// state a reservation is in.

package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationgc"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// listReservations lists every IPReservation (they are cluster-scoped),
// keeping those whose owner is in namespace ("" for all), sorted by pool
// then name.
func listReservations(ctx context.Context, c client.Reader, namespace string) ([]ipkeeperv1alpha1.IPReservation, error) {
	var list ipkeeperv1alpha1.IPReservationList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing IPReservations: %w", err)
	}
	out := list.Items[:0]
	for _, r := range list.Items {
		if namespace == "" || r.Spec.Owner.Namespace == namespace {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		pi, pj := out[i].Spec.Pool, out[j].Spec.Pool
		if pi != pj {
			return pi < pj
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// ownedBy keeps the reservations of one owner (by UID: a recreated owner
// of the same name is another owner).
func ownedBy(list []ipkeeperv1alpha1.IPReservation, kind ipkeeperv1alpha1.OwnerKind, uid types.UID) []ipkeeperv1alpha1.IPReservation {
	var out []ipkeeperv1alpha1.IPReservation
	for _, r := range list {
		if r.Spec.Owner.Kind == kind && r.Spec.Owner.UID == uid {
			out = append(out, r)
		}
	}
	return out
}

// ownerGVKs are the list kinds of the owner kinds, read as metadata only.
var ownerGVKs = map[ipkeeperv1alpha1.OwnerKind]schema.GroupVersionKind{
	ipkeeperv1alpha1.OwnerPod:            corev1.SchemeGroupVersion.WithKind("PodList"),
	ipkeeperv1alpha1.OwnerIPAMClaim:      ipamclaimsv1alpha1.SchemeGroupVersion.WithKind("IPAMClaimList"),
	ipkeeperv1alpha1.OwnerIPAddressClaim: reservationgc.IPAddressClaimGVK.GroupVersion().WithKind(reservationgc.IPAddressClaimGVK.Kind + "List"),
}

// owners records which owners exist, from one metadata list per kind.
type owners struct {
	uids map[ipkeeperv1alpha1.OwnerKind]map[types.UID]bool
	// notServed are the kinds the API server does not serve (Cluster API
	// or the IPAMClaim CRD not installed): their owners' fate is unknown.
	notServed map[ipkeeperv1alpha1.OwnerKind]bool
}

// loadOwners lists the objects of every owner kind in namespace ("" for all).
func loadOwners(ctx context.Context, c client.Reader, namespace string) (*owners, error) {
	o := &owners{uids: map[ipkeeperv1alpha1.OwnerKind]map[types.UID]bool{}, notServed: map[ipkeeperv1alpha1.OwnerKind]bool{}}
	for kind, gvk := range ownerGVKs {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk)
		err := c.List(ctx, list, client.InNamespace(namespace))
		switch {
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			o.notServed[kind] = true
			continue
		case err != nil:
			return nil, fmt.Errorf("listing %ss: %w", kind, err)
		}
		uids := map[types.UID]bool{}
		for _, item := range list.Items {
			uids[item.UID] = true
		}
		o.uids[kind] = uids
	}
	return o, nil
}

// exists reports whether the owner (that UID) exists; known is false when
// its kind is not served.
func (o *owners) exists(owner ipkeeperv1alpha1.ReservationOwner) (exists, known bool) {
	if o.notServed[owner.Kind] {
		return false, false
	}
	uids, ok := o.uids[owner.Kind]
	if !ok {
		return false, false // a kind this version does not know
	}
	return uids[owner.UID], true
}

// ownerExists reads one owner (metadata only): whether it exists with
// that UID; known is false when its kind is not served or not known.
func ownerExists(ctx context.Context, c client.Reader, owner ipkeeperv1alpha1.ReservationOwner) (exists, known bool, err error) {
	gvk, ok := ownerGVKs[owner.Kind]
	if !ok {
		return false, false, nil
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk.GroupVersion().WithKind(strings.TrimSuffix(gvk.Kind, "List")))
	err = c.Get(ctx, types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}, obj)
	switch {
	case meta.IsNoMatchError(err):
		return false, false, nil
	case apierrors.IsNotFound(err):
		return false, true, nil
	case err != nil:
		return false, false, fmt.Errorf("reading %s %s/%s: %w", owner.Kind, owner.Namespace, owner.Name, err)
	}
	return obj.UID == owner.UID, true, nil
}

// vmBehindClaim names the VM or VMI that owns an IPAMClaim (claimowner's
// rule), "" when the claim is gone, is another object now, or no VM owns it.
func vmBehindClaim(ctx context.Context, c client.Reader, owner ipkeeperv1alpha1.ReservationOwner) (string, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	err := c.Get(ctx, types.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}, &claim)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading IPAMClaim %s/%s: %w", owner.Namespace, owner.Name, err)
	case claim.UID != owner.UID:
		return "", nil
	}
	vm, ok := claimowner.Of(&claim)
	if !ok {
		return "", nil
	}
	return vm.Kind + " " + vm.Name, nil
}

// reservationState says whether a reservation holds its address for its
// owner or only waits out its pool's reuse cooldown.
func reservationState(spec *ipkeeperv1alpha1.IPReservationSpec, now time.Time) string {
	left, released := reservation.Left(spec, now)
	switch {
	case !released && spec.LentTo != nil:
		return fmt.Sprintf("held, lent to %s while a decentralized live migration moves its VM there", ownerString(*spec.LentTo))
	case !released:
		return "held"
	case left > 0:
		return fmt.Sprintf("released, reusable after %s (in %s)", spec.ReuseAfter.UTC().Format(time.RFC3339), left.Round(time.Second))
	default:
		return fmt.Sprintf("released, cooldown over since %s (the GC deletes it)", spec.ReuseAfter.UTC().Format(time.RFC3339))
	}
}

func ownerString(o ipkeeperv1alpha1.ReservationOwner) string {
	return fmt.Sprintf("%s %s/%s", o.Kind, o.Namespace, o.Name)
}

// reservationNames are the IPReservations of rows, for -o name; rows
// without one (name "") name nothing.
func reservationNames[T any](rows []T, name func(T) string) []objectName {
	gvk := ipkeeperv1alpha1.GroupVersion.WithKind("IPReservation")
	var out []objectName
	for _, r := range rows {
		if n := name(r); n != "" {
			out = append(out, objectName{gvk: gvk, name: n})
		}
	}
	return out
}
