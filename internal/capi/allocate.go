// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservationindex"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// errExhausted: every usable address of the claim's ranges is held.
var errExhausted = errors.New("no free address")

// maxCollisions bounds the creates one reserve may lose to holders the
// cache did not show yet; past it the claim is retried later.
const maxCollisions = 64

// claimRanges are the ranges a claim draws from: those of the family of
// the pool's first range, in spec order (the contract is single-stack:
// one claim, one address).
func claimRanges(ranges []iprange.Range) []iprange.Range {
	var out []iprange.Range
	for _, r := range ranges {
		if r.Is4() == ranges[0].Is4() {
			out = append(out, r)
		}
	}
	return out
}

// reserve takes one address of pool for claim: in the first range with a
// free one, a candidate not held according to the cache, made the claim's
// by creating its IPReservation (the name is the lock: whoever creates it
// holds the address). A name that exists is someone else's (next
// candidate) or, after a create whose answer was lost, the claim's own
// (adopted). The candidate is seeded by the claim's UID, so a retry tries
// the same address first.
func (r *ClaimReconciler) reserve(ctx context.Context, claim *ipamv1.IPAddressClaim, pool string, ranges []iprange.Range) (*v1alpha1.IPReservation, error) {
	taken, err := reservationindex.Taken(ctx, r.Reservations, pool)
	if err != nil {
		return nil, err
	}
	isTaken := func(a netip.Addr) bool { return taken[a] }
	collisions := 0
	for _, rng := range claimRanges(ranges) {
		for {
			ip, err := allocator.Candidate(rng, isTaken, string(claim.UID))
			if errors.Is(err, allocator.ErrExhausted) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("choosing an address in range %s: %w", rng, err)
			}
			res, err := r.create(ctx, claim, pool, ip)
			if err == nil || !apierrors.IsAlreadyExists(err) {
				return res, err
			}
			taken[ip] = true
			if collisions++; collisions > maxCollisions {
				return nil, fmt.Errorf("%d addresses of pool %s the cache showed free were held: the cache is behind; retrying", collisions, pool)
			}
		}
	}
	return nil, errExhausted
}

// create creates the reservation of ip in pool for claim. AlreadyExists
// is returned only when the reservation is someone else's.
func (r *ClaimReconciler) create(ctx context.Context, claim *ipamv1.IPAddressClaim, pool string, ip netip.Addr) (*v1alpha1.IPReservation, error) {
	if err := v1alpha1.ValidateIP(ip); err != nil {
		return nil, fmt.Errorf("address %s of pool %s: %w", ip, pool, err)
	}
	res := &v1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Reservation(pool, ip),
			Labels: naming.ReservationLabels(pool, string(v1alpha1.OwnerIPAddressClaim)),
		},
		Spec: v1alpha1.IPReservationSpec{
			Network: pool, Pool: pool, IP: ip.String(),
			Owner: v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	err := r.Client.Create(ctx, res)
	if err == nil {
		return res, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating IPReservation %s: %w", res.Name, err)
	}
	cur := &v1alpha1.IPReservation{}
	if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(res), cur); gerr != nil {
		if apierrors.IsNotFound(gerr) { // released meanwhile: try again later
			return nil, fmt.Errorf("IPReservation %s went while it was looked at: %w", res.Name, gerr)
		}
		return nil, fmt.Errorf("reading IPReservation %s: %w", res.Name, gerr)
	}
	if owns(claim, cur) {
		return cur, nil
	}
	return nil, err
}

// owns reports whether res is claim's (and not released).
func owns(claim *ipamv1.IPAddressClaim, res *v1alpha1.IPReservation) bool {
	o := res.Spec.Owner
	return o.Kind == v1alpha1.OwnerIPAddressClaim && o.UID == claim.UID && !res.Spec.Released()
}

// rangeOf is the range of ranges that contains ip (its subnet and
// gateway go into the IPAddress).
func rangeOf(ranges []iprange.Range, ip netip.Addr) (iprange.Range, bool) {
	for _, r := range ranges {
		if r.Contains(ip) {
			return r, true
		}
	}
	return iprange.Range{}, false
}
