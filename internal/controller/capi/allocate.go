// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"net/netip"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

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

// holder is who a claim's reservation is made for: the claim, its
// network being its pool (it is of no CNI network).
func holder(claim *ipamv1.IPAddressClaim, pool string) claimalloc.Holder {
	return claimalloc.Holder{
		Owner:   v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		Network: pool,
	}
}

// owns reports whether res is claim's (and not released).
func owns(claim *ipamv1.IPAddressClaim, res *v1alpha1.IPReservation) bool {
	return reservation.HeldBy(res, v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, UID: claim.UID}, "")
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
