// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// poolOwner returns the owner of a pool's blocks of IPAMClaims: the
// IPPool, so the garbage collector deletes them with the pool.
func poolOwner(c client.Client) func(ctx context.Context, pool string) (*metav1.OwnerReference, error) {
	return func(ctx context.Context, pool string) (*metav1.OwnerReference, error) {
		var owner ipkeeperv1alpha1.IPPool
		if err := c.Get(ctx, client.ObjectKey{Name: pool}, &owner); err != nil {
			return nil, fmt.Errorf("reading IPPool %s, the owner of its blocks of IPAMClaims: %w", pool, err)
		}
		return &metav1.OwnerReference{
			APIVersion: ipkeeperv1alpha1.GroupVersion.String(), Kind: "IPPool", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(false),
		}, nil
	}
}
