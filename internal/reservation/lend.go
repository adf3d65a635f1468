// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"fmt"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The writes of a handover (KubeVirt's decentralized live migration of a
// VM to a VM of another namespace): the source claim's reservation is
// lent to the receiver's claim while both launchers run (spec.lentTo),
// passes to it when the migration succeeded, and is taken back when it
// failed. Each is one KubeStore.Update at the version read, so the
// address always has exactly one owner and is never free; a conflict or
// a gone reservation is an error wrapping ErrChanged (read it again and
// decide anew). The API server allows the owner to change only to lentTo.

// Lend lets the IPAMClaim to use res's address beside its owner.
func Lend(ctx context.Context, s KubeStore, res *ipkeeperv1alpha1.IPReservation, to ipkeeperv1alpha1.ReservationOwner) error {
	updated := res.DeepCopy()
	updated.Spec.LentTo = &to
	if err := s.Update(ctx, updated); err != nil {
		return fmt.Errorf("lending IPReservation %s (%s) to IPAMClaim %s/%s: %w", res.Name, res.Spec.IP, to.Namespace, to.Name, err)
	}
	*res = *updated
	return nil
}

// Unlend takes res's address back from the claim it was lent to.
func Unlend(ctx context.Context, s KubeStore, res *ipkeeperv1alpha1.IPReservation) error {
	if res.Spec.LentTo == nil {
		return nil
	}
	updated := res.DeepCopy()
	updated.Spec.LentTo = nil
	if err := s.Update(ctx, updated); err != nil {
		return fmt.Errorf("taking IPReservation %s (%s) back from IPAMClaim %s/%s: %w", res.Name, res.Spec.IP, res.Spec.LentTo.Namespace, res.Spec.LentTo.Name, err)
	}
	*res = *updated
	return nil
}

// PassToBorrower makes the claim res's address was lent to its owner.
func PassToBorrower(ctx context.Context, s KubeStore, res *ipkeeperv1alpha1.IPReservation) error {
	if res.Spec.LentTo == nil {
		return nil
	}
	updated := res.DeepCopy()
	updated.Spec.Owner, updated.Spec.LentTo = *res.Spec.LentTo, nil
	if err := s.Update(ctx, updated); err != nil {
		return fmt.Errorf("passing IPReservation %s (%s) to IPAMClaim %s/%s: %w", res.Name, res.Spec.IP, res.Spec.LentTo.Namespace, res.Spec.LentTo.Name, err)
	}
	*res = *updated
	return nil
}
