// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// blockStore takes blocks of IPAMClaims. A block is owned by its IPPool,
// so the garbage collector deletes it with the pool; which blocks are held
// is read from the controller's cache of IPBlocks (every holder's).
type blockStore struct{ c client.Client }

func (s *blockStore) Create(ctx context.Context, pool, key string, p netip.Prefix) (*ipkeeperv1alpha1.IPBlock, error) {
	var owner ipkeeperv1alpha1.IPPool
	if err := s.c.Get(ctx, client.ObjectKey{Name: pool}, &owner); err != nil {
		return nil, fmt.Errorf("reading IPPool %s, the owner of its blocks of IPAMClaims: %w", pool, err)
	}
	b := &ipkeeperv1alpha1.IPBlock{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Block(key, p),
			Labels: map[string]string{naming.PoolLabel: naming.PoolLabelValue(pool)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ipkeeperv1alpha1.GroupVersion.String(), Kind: "IPPool", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: pool, CIDR: p.String(), Holder: ipkeeperv1alpha1.HolderIPAMClaims},
	}
	err := s.c.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("%w: IPBlock %s", blocks.ErrTaken, b.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("creating IPBlock %s: %w", b.Name, err)
	}
	return b, nil
}

func (s *blockStore) Held(ctx context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error) {
	var list ipkeeperv1alpha1.IPBlockList
	if err := s.c.List(ctx, &list, client.MatchingLabels{naming.PoolLabel: naming.PoolLabelValue(pool)}); err != nil {
		return nil, fmt.Errorf("listing the IPBlocks of pool %q: %w", pool, err)
	}
	return list.Items, nil
}
