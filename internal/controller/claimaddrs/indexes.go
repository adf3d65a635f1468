// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
)

// Field indexes on the main manager's cache.
const (
	// indexClaimNetwork maps claims to their spec.network: a NAD of that
	// network appearing or changing looks at them again.
	indexClaimNetwork = "claimaddrs.network"
	// indexClaimFilled maps claims to "true" or "false": whether they
	// record addresses. A pool appearing looks at those that do not.
	indexClaimFilled = "claimaddrs.filled"
	// indexClaimAddress maps claims to the addresses they record, or,
	// before their first allocation, request: a reservation of one of them
	// that changes or goes (someone else's released) looks at them again,
	// so a claim waiting for an address someone else holds gets it at
	// once, not on its backoff.
	indexClaimAddress = "claimaddrs.address"
	// indexNADNetwork maps the NADs whose IPAM is ipkeeper to their CNI
	// network: where a claim of that network gets its addresses.
	indexNADNetwork = "claimaddrs.nadNetwork"
)

func setupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	indexes := []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&ipamclaimsv1alpha1.IPAMClaim{}, indexClaimNetwork, func(o client.Object) []string {
			return []string{o.(*ipamclaimsv1alpha1.IPAMClaim).Spec.Network}
		}},
		{&ipamclaimsv1alpha1.IPAMClaim{}, indexClaimFilled, func(o client.Object) []string {
			return []string{fmt.Sprint(claimstatus.Filled(o.(*ipamclaimsv1alpha1.IPAMClaim)))}
		}},
		{&ipamclaimsv1alpha1.IPAMClaim{}, indexClaimAddress, func(o client.Object) []string {
			return claimAddresses(o.(*ipamclaimsv1alpha1.IPAMClaim))
		}},
		{&nadv1.NetworkAttachmentDefinition{}, indexNADNetwork, func(o client.Object) []string {
			cfg, found, err := inlinepool.Network(o.(*nadv1.NetworkAttachmentDefinition))
			if err != nil || !found {
				return nil
			}
			return []string{cfg.Name}
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	// A claim's owner pod (ownerPod). The KubeVirt support's claim
	// release controller reads the same index through this cache.
	return podrefs.SetupIndex(ctx, indexer)
}

// claimAddresses returns what indexClaimAddress holds of a claim.
func claimAddresses(claim *ipamclaimsv1alpha1.IPAMClaim) []string {
	var out []string
	for _, ip := range claimstatus.Addresses(claim) {
		out = append(out, ip.String())
	}
	if len(out) > 0 {
		return out
	}
	if v, ok := claim.Annotations[claimstatus.RequestedAnnotation]; ok {
		if addrs, err := parseRequest(v); err == nil {
			for _, ip := range addrs {
				out = append(out, ip.String())
			}
		}
	}
	return out
}
