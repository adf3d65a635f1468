// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"fmt"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// DescribeHolder says who holds an address, for a requester in
// namespace, as the end of a sentence that names the address ("static IP
// 10.1.0.50 on network "blue" ..."): name is the address's reservation,
// r that reservation as read (nil when it could not be read).
//
// The holder is named only when it is in the requester's namespace:
// another tenant's objects are none of the requester's business, so an
// unknown holder is described like one of another namespace. An address
// released by its holder and cooling down (its pool's reuseCooldown) is a
// passing state, and the phrase says until when.
func DescribeHolder(name string, r *ipkeeperv1alpha1.IPReservation, namespace string) string {
	switch {
	case r != nil && r.Spec.Released():
		return fmt.Sprintf("was released by its previous holder and cools down until %s (IPPool %q reuseCooldown)",
			r.Spec.ReuseAfter.UTC().Format(time.RFC3339), r.Spec.Pool)
	case r == nil || r.Spec.Owner.Namespace != namespace:
		return fmt.Sprintf("is already reserved by a workload in another namespace (reservation %s)", name)
	}
	o := r.Spec.Owner
	return fmt.Sprintf("is already reserved by %s %s/%s (reservation %s)", o.Kind, o.Namespace, o.Name, name)
}
