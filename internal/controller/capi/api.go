// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

const (
	// ReleaseFinalizer holds an IPAddressClaim until its address is
	// released (the contract leaves the claim's finalizer to the provider).
	ReleaseFinalizer = "ipkeeper.io/release-address"
	// ProtectFinalizer keeps an IPAddress while its claim exists: the name
	// the contract gives.
	ProtectFinalizer = "ipam.cluster.x-k8s.io/protect-address"
	// PoolKind is the kind a poolRef names to be served by ipkeeper.
	PoolKind = "IPPool"
)

// PoolGroup is the API group a poolRef names to be served by ipkeeper.
var PoolGroup = v1alpha1.GroupVersion.Group

// Ours reports whether ref names an ipkeeper IPPool.
func Ours(ref ipamv1.IPPoolReference) bool {
	return ref.APIGroup == PoolGroup && ref.Kind == PoolKind && ref.Name != ""
}

// AddToScheme adds the Cluster API kinds the provider reads and writes:
// IPAddressClaim and IPAddress, and Cluster (for pause).
func AddToScheme(s *runtime.Scheme) error {
	if err := ipamv1.AddToScheme(s); err != nil {
		return fmt.Errorf("adding Cluster API IPAM types to the scheme: %w", err)
	}
	if err := clusterv1.AddToScheme(s); err != nil {
		return fmt.Errorf("adding Cluster API core types to the scheme: %w", err)
	}
	return nil
}

// clusterName is the Cluster a claim belongs to: spec.clusterName, or the
// deprecated cluster.x-k8s.io/cluster-name label; "" for none.
func clusterName(claim *ipamv1.IPAddressClaim) string {
	if claim.Spec.ClusterName != "" {
		return claim.Spec.ClusterName
	}
	return claim.Labels[clusterv1.ClusterNameLabel]
}
