// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"fmt"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Field indexes on IPAddressClaims in the provider's cache.
const (
	// indexPool: the name of the ipkeeper IPPool a claim draws from (only
	// claims of ours are indexed), so a pool change wakes its claims.
	indexPool = "capi.ipkeeper.io/pool"
	// indexCluster: the Cluster a claim belongs to, so unpausing a Cluster
	// wakes its claims.
	indexCluster = "capi.ipkeeper.io/cluster"
)

// SetupIndexes registers the claim indexes with indexer.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	claim := &ipamv1.IPAddressClaim{}
	if err := indexer.IndexField(ctx, claim, indexPool, func(o client.Object) []string {
		ref := o.(*ipamv1.IPAddressClaim).Spec.PoolRef
		if !Ours(ref) {
			return nil
		}
		return []string{ref.Name}
	}); err != nil {
		return fmt.Errorf("indexing IPAddressClaims by pool: %w", err)
	}
	if err := indexer.IndexField(ctx, claim, indexCluster, func(o client.Object) []string {
		c := o.(*ipamv1.IPAddressClaim)
		if name := clusterName(c); name != "" && Ours(c.Spec.PoolRef) {
			return []string{name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing IPAddressClaims by cluster: %w", err)
	}
	return nil
}
