// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// Field indexes on the manager's cache.
const (
	// indexNAD maps VMs and VMIs to the NADs ("ns/name") their secondary
	// networks use, so a NAD appearing or changing re-queues its users.
	indexNAD = "ipkeeper.nad"
	// indexOwnerName maps claims to their owner's name: a VM, its VMI and
	// its launcher pods all carry that name.
	indexOwnerName = "ipkeeper.ownerName"
)

// SetupIndexes registers the field indexes the reconcilers rely on but
// the claims' (SetupClaimIndexes) and the pods' (podrefs.SetupIndex),
// which are the main manager's.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	nadsOf := func(namespace string, spec *kubevirtv1.VirtualMachineInstanceSpec) []string {
		var keys []string
		for _, n := range kubevirt.SecondaryNetworks(spec) {
			if key, err := multus.NADRef(n.NetworkName, namespace); err == nil {
				keys = append(keys, key.String())
			}
		}
		return keys
	}
	indexes := []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&kubevirtv1.VirtualMachine{}, indexNAD, func(o client.Object) []string {
			vm := o.(*kubevirtv1.VirtualMachine)
			if vm.Spec.Template == nil {
				return nil
			}
			return nadsOf(vm.Namespace, &vm.Spec.Template.Spec)
		}},
		{&kubevirtv1.VirtualMachineInstance{}, indexNAD, func(o client.Object) []string {
			vmi := o.(*kubevirtv1.VirtualMachineInstance)
			return nadsOf(vmi.Namespace, &vmi.Spec)
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}

// SetupClaimIndexes registers the claims' index the reconcilers rely on
// (ClaimsOf). It is the main manager's: the KubeVirt support reads
// claims from the main manager's cache.
func SetupClaimIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &ipamclaimsv1alpha1.IPAMClaim{}, indexOwnerName, func(o client.Object) []string {
		if owner, ok := claimowner.Of(o.(*ipamclaimsv1alpha1.IPAMClaim)); ok {
			return []string{owner.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing IPAMClaims by %s: %w", indexOwnerName, err)
	}
	return nil
}

// ClaimsOf lists the claims in namespace whose owner (a VM, or a
// standalone VMI) has that name, from a cache with SetupClaimIndexes' index.
func ClaimsOf(ctx context.Context, reader client.Reader, namespace, owner string) ([]ipamclaimsv1alpha1.IPAMClaim, error) {
	var list ipamclaimsv1alpha1.IPAMClaimList
	if err := reader.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexOwnerName: owner}); err != nil {
		return nil, fmt.Errorf("listing the IPAMClaims of %s/%s: %w", namespace, owner, err)
	}
	return list.Items, nil
}
