// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
)

// A VM asks for its addresses to be kept after their claims are released
// with claimstatus.RetentionAnnotation on its own metadata (a standalone
// VMI's on its own): the owner reconcilers record it on each claim they
// make (capped), and the claim release controller retires the claim's
// reservations for that long before the claim goes, so that a claim of the
// same namespace and name takes them back (reservation.KeptFor).

// ReasonRetentionRefused is the Warning event on a VM whose
// RetentionAnnotation cannot be applied as written: unreadable (no
// retention), above --max-address-retention (capped), or set while the
// controller allows none.
const ReasonRetentionRefused EventReason = "AddressRetentionRefused"

// DefaultMaxRetention is --max-address-retention's default: how long a VM
// may ask for its addresses to be kept at most.
const DefaultMaxRetention = 24 * time.Hour

// retentionOf reads the owner's RetentionAnnotation as applied under max:
// the duration, and what was refused of it (nil when applied as written).
func retentionOf(annotations map[string]string, max time.Duration) (time.Duration, error) {
	v, ok := annotations[claimstatus.RetentionAnnotation]
	if !ok {
		return 0, nil
	}
	d, err := claimstatus.ParseRetention(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w; the addresses are not kept after the claims are released", err)
	case d > max && max <= 0:
		return 0, fmt.Errorf("annotation %s %q: ipkeeper-controller keeps no VM's addresses (--max-address-retention=0)", claimstatus.RetentionAnnotation, v)
	case d > max:
		return max, fmt.Errorf("annotation %s %q is above ipkeeper-controller's --max-address-retention; the addresses are kept for %s", claimstatus.RetentionAnnotation, v, max)
	}
	return d, nil
}

// setRetention records d's retention on the claim, with the finalizer
// that holds the claim until it is applied, or removes both.
func setRetention(claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) {
	if d.Retention <= 0 {
		delete(claim.Annotations, claimstatus.RetentionAnnotation)
		controllerutil.RemoveFinalizer(claim, RetentionFinalizer)
		return
	}
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[claimstatus.RetentionAnnotation] = d.Retention.String()
	controllerutil.AddFinalizer(claim, RetentionFinalizer)
}

// retentionRecorded reports whether the claim records d's retention, and
// holds its finalizer exactly when it has one.
func retentionRecorded(claim *ipamclaimsv1alpha1.IPAMClaim, d Desired) bool {
	v, ok := claim.Annotations[claimstatus.RetentionAnnotation]
	held := controllerutil.ContainsFinalizer(claim, RetentionFinalizer)
	if d.Retention <= 0 {
		return !ok && !held
	}
	return ok && held && v == d.Retention.String()
}

// Retainer retires a released claim's reservations for its retention.
type Retainer struct {
	// Reservations reads reservations (reservationindex's owner index) and
	// pools from a cache; Live reads a pool the cache has not seen yet.
	Reservations client.Reader
	Live         client.Reader
	// Writer writes the reservations (reservation.KubeStore).
	Writer client.Client
	// Max caps every claim's retention (--max-address-retention).
	Max time.Duration
	Now func() time.Time
}

// retain retires every reservation the claim holds for its retention (or
// its pool's reuseCooldown, if longer), and returns the retention; 0 and
// nothing written when the claim has none. A reservation changed meanwhile
// is an error: the release is tried again and reads it anew. One created
// an instant ago that the cache has not seen is left to the garbage
// collector, which releases it with its pool's cooldown alone.
func (r *Retainer) retain(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (time.Duration, error) {
	if r == nil {
		return 0, nil
	}
	keep := claimstatus.CappedRetention(claim.Annotations, r.Max)
	if keep <= 0 {
		return 0, nil
	}
	held, err := reservationindex.ByOwner(ctx, r.Reservations, claim.UID)
	if err != nil {
		return 0, err
	}
	var errs []error
	for i := range held {
		res := &held[i]
		// One lent to a decentralized live migration's receiver passes to
		// it (the garbage collector): the VM may run there.
		if res.Spec.Released() || res.Spec.LentTo != nil {
			continue
		}
		cooldown, err := reservation.PoolCooldown(ctx, r.Reservations, r.Live, res.Spec.Pool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		how, err := reservation.Release(ctx, reservation.KubeStore{Client: r.Writer}, res, max(cooldown, keep), r.Now())
		if err != nil {
			errs = append(errs, fmt.Errorf("keeping the address of IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err))
			continue
		}
		addressesRetained.Inc()
		log.FromContext(ctx).Info("retired the released claim's reservation for its retention", "claim", claim.Name,
			"reservation", res.Name, "ip", res.Spec.IP, "reuseAfter", how.ReuseAfter)
	}
	return keep, errors.Join(errs...)
}
