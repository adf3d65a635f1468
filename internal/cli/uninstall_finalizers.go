// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"slices"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// claimsFinalizerName is the finalizer KubeVirt's ipam-extensions puts on
// the claims it makes too: only --release-claims removes it.
const claimsFinalizerName = claims.Finalizer

// ownedFinalizer is a finalizer ipkeeper puts on objects of one kind, and
// which of them carry it as ipkeeper's (ours nil: all).
type ownedFinalizer struct {
	name string
	ours func(metav1.Object) bool
}

// kindFinalizers are ipkeeper's finalizers on one kind.
type kindFinalizers struct {
	gvk        schema.GroupVersionKind
	finalizers []ownedFinalizer
}

// ipkeeperFinalizers are every finalizer ipkeeper-controller puts on
// objects, by kind (IPReservations and IPBlocks carry none).
func ipkeeperFinalizers(releaseClaims bool) []kindFinalizers {
	claimFinalizers := []ownedFinalizer{{name: claims.RetentionFinalizer}}
	if releaseClaims {
		claimFinalizers = append(claimFinalizers, ownedFinalizer{name: claims.Finalizer, ours: claimowner.Managed})
	}
	return []kindFinalizers{
		{gvk: ipkeeperv1alpha1.GroupVersion.WithKind("IPPool"), finalizers: []ownedFinalizer{{name: ipkeeperv1alpha1.PoolInUseFinalizer}}},
		{gvk: ipamclaimsv1alpha1.SchemeGroupVersion.WithKind("IPAMClaim"), finalizers: claimFinalizers},
		{gvk: ipamv1.GroupVersion.WithKind("IPAddressClaim"), finalizers: []ownedFinalizer{{name: capi.ReleaseFinalizer}}},
		// The contract's name, which every provider uses: ours only on
		// the IPAddresses an ipkeeper IPPool owns.
		{gvk: ipamv1.GroupVersion.WithKind("IPAddress"), finalizers: []ownedFinalizer{{name: capi.ProtectFinalizer, ours: ownedByIPPool}}},
	}
}

// held are the finalizers of kf that obj carries as ipkeeper's.
func (kf kindFinalizers) held(obj metav1.Object) []string {
	var names []string
	for _, f := range kf.finalizers {
		if slices.Contains(obj.GetFinalizers(), f.name) && (f.ours == nil || f.ours(obj)) {
			names = append(names, f.name)
		}
	}
	return names
}

// ownedByIPPool reports whether an ipkeeper IPPool owns obj, as it owns
// the IPAddresses ipkeeper makes for Cluster API claims.
func ownedByIPPool(obj metav1.Object) bool {
	return slices.ContainsFunc(obj.GetOwnerReferences(), func(ref metav1.OwnerReference) bool {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		return err == nil && gv.Group == capi.PoolGroup && ref.Kind == capi.PoolKind
	})
}
