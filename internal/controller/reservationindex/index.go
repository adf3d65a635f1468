// SPDX-License-Identifier: Apache-2.0

// Package reservationindex is the one home of the field indexes on
// IPReservations in ipkeeper-controller's cache: by owner UID (which
// reservations an owner holds), by claim name (what an IPAMClaim of that
// namespace and name held before, whatever its UID), by the claim a
// reservation is lent to (a decentralized live migration) and by pool (which
// addresses a pool has handed out). They are registered once, on the main manager, and read by
// every controller that needs them, so 50k reservations are cached and
// indexed once.
package reservationindex

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

const (
	// OwnerUID indexes reservations by spec.owner.uid.
	OwnerUID = "ipkeeper.ownerUID"
	// Pool indexes reservations by spec.pool.
	Pool = "ipkeeper.pool"
	// ClaimName indexes IPAMClaims' reservations by the claim's
	// "namespace/name".
	ClaimName = "ipkeeper.claimName"
	// LentToUID indexes reservations by spec.lentTo.uid.
	LentToUID = "ipkeeper.lentToUID"
)

// Setup registers the indexes with indexer (a manager's field indexer,
// before the manager starts).
func Setup(ctx context.Context, indexer client.FieldIndexer) error {
	res := &v1alpha1.IPReservation{}
	if err := indexer.IndexField(ctx, res, OwnerUID, func(o client.Object) []string {
		return []string{string(o.(*v1alpha1.IPReservation).Spec.Owner.UID)}
	}); err != nil {
		return fmt.Errorf("indexing IPReservations by owner UID: %w", err)
	}
	if err := indexer.IndexField(ctx, res, Pool, func(o client.Object) []string {
		s := o.(*v1alpha1.IPReservation).Spec
		return []string{s.Pool}
	}); err != nil {
		return fmt.Errorf("indexing IPReservations by pool: %w", err)
	}
	if err := indexer.IndexField(ctx, res, ClaimName, func(o client.Object) []string {
		if o := o.(*v1alpha1.IPReservation).Spec.Owner; o.Kind == v1alpha1.OwnerIPAMClaim {
			return []string{o.Namespace + "/" + o.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing IPReservations by claim name: %w", err)
	}
	if err := indexer.IndexField(ctx, res, LentToUID, func(o client.Object) []string {
		if l := o.(*v1alpha1.IPReservation).Spec.LentTo; l != nil {
			return []string{string(l.UID)}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing IPReservations by the claim they are lent to: %w", err)
	}
	return nil
}

// ByClaimName lists the reservations of every IPAMClaim that had this
// namespace and name, held or released.
func ByClaimName(ctx context.Context, r client.Reader, namespace, name string) ([]v1alpha1.IPReservation, error) {
	var list v1alpha1.IPReservationList
	if err := r.List(ctx, &list, client.MatchingFields{ClaimName: namespace + "/" + name}); err != nil {
		return nil, fmt.Errorf("listing the IPReservations of IPAMClaims %s/%s: %w", namespace, name, err)
	}
	return list.Items, nil
}

// LentTo lists the reservations lent to the IPAMClaim with uid (a
// decentralized live migration's receiver).
func LentTo(ctx context.Context, r client.Reader, uid types.UID) ([]v1alpha1.IPReservation, error) {
	var list v1alpha1.IPReservationList
	if err := r.List(ctx, &list, client.MatchingFields{LentToUID: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing the IPReservations lent to claim %s: %w", uid, err)
	}
	return list.Items, nil
}

// ByOwner lists the reservations held by the owner with uid.
func ByOwner(ctx context.Context, r client.Reader, uid types.UID) ([]v1alpha1.IPReservation, error) {
	var list v1alpha1.IPReservationList
	if err := r.List(ctx, &list, client.MatchingFields{OwnerUID: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing the IPReservations of owner %s: %w", uid, err)
	}
	return list.Items, nil
}

// Taken returns the addresses of pool that reservations hold, released
// ones waiting out a cooldown included (they are not free yet).
func Taken(ctx context.Context, r client.Reader, pool string) (map[netip.Addr]bool, error) {
	var list v1alpha1.IPReservationList
	if err := r.List(ctx, &list, client.MatchingFields{Pool: pool}); err != nil {
		return nil, fmt.Errorf("listing the IPReservations of pool %s: %w", pool, err)
	}
	taken := make(map[netip.Addr]bool, len(list.Items))
	for i := range list.Items {
		if ip, err := netip.ParseAddr(list.Items[i].Spec.IP); err == nil {
			taken[ip] = true
		}
	}
	return taken, nil
}
