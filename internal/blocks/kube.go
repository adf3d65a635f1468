// SPDX-License-Identifier: Apache-2.0

package blocks

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// KubeStore is the Store of every holder: the one place an IPBlock is
// created (GiveBack, the one place one is deleted). The agent uses it for its node (uncached client, the Node as
// owner), ipkeeper-controller for IPAMClaims (its cache, the IPPool as
// owner).
type KubeStore struct {
	Client client.Client
	Holder ipkeeperv1alpha1.BlockHolder
	// Node is the holding node; only with HolderNode.
	Node string
	// Owner returns the owner reference of a new block of pool, so the
	// garbage collector deletes blocks with what they belong to; nil for
	// none.
	Owner func(ctx context.Context, pool string) (*metav1.OwnerReference, error)
	// Writing counts API writes (metrics); may be nil.
	Writing func(verb string)
}

// Create implements Store.
func (s *KubeStore) Create(ctx context.Context, pool, key string, p netip.Prefix) (*ipkeeperv1alpha1.IPBlock, error) {
	b := &ipkeeperv1alpha1.IPBlock{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Block(key, p),
			Labels: map[string]string{naming.PoolLabel: naming.PoolLabelValue(pool)},
		},
		Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: pool, CIDR: p.String(), Holder: s.Holder},
	}
	if s.Holder == ipkeeperv1alpha1.HolderNode {
		b.Labels[naming.NodeLabel] = naming.NodeLabelValue(s.Node)
		b.Spec.Node = s.Node
	}
	if s.Owner != nil {
		ref, err := s.Owner(ctx, pool)
		if err != nil {
			return nil, err
		}
		if ref != nil {
			b.OwnerReferences = []metav1.OwnerReference{*ref}
		}
	}
	if s.Writing != nil {
		s.Writing("create")
	}
	err := s.Client.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("%w: IPBlock %s", ErrTaken, b.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("creating IPBlock %s: %w", b.Name, err)
	}
	return b, nil
}

// Held implements Store: every holder's blocks of pool, as the client
// sees them.
func (s *KubeStore) Held(ctx context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error) {
	var list ipkeeperv1alpha1.IPBlockList
	if err := s.Client.List(ctx, &list, client.MatchingLabels{naming.PoolLabel: naming.PoolLabelValue(pool)}); err != nil {
		return nil, fmt.Errorf("listing the IPBlocks of pool %q: %w", pool, err)
	}
	return list.Items, nil
}

// GiveBack deletes a block, exactly the version read (UID and
// resourceVersion preconditions): one retaken or changed meanwhile stays.
// A block already gone is not an error.
func GiveBack(ctx context.Context, c client.Client, b *ipkeeperv1alpha1.IPBlock) error {
	uid, rv := b.UID, b.ResourceVersion
	err := c.Delete(ctx, b, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting IPBlock %s: %w", b.Name, err)
	}
	return nil
}
