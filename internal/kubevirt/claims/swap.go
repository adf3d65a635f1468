// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// ClaimNetworks reads claims of namespace through reader for
// naming.ClaimFor: the claims controller (which creates the chosen claim)
// and the pod webhook (which makes the launcher reference it) both choose
// with it, from their caches.
func ClaimNetworks(ctx context.Context, reader client.Reader, namespace string) naming.ClaimNetwork {
	return OwnedClaimNetworks(ctx, reader, namespace, nil)
}

// OwnedClaimNetworks is ClaimNetworks limited to the claims mine accepts
// (nil: all), the owner's own: naming.ClaimFor keeps a claim of
// ipam-extensions' name only when it is the owner's.
func OwnedClaimNetworks(ctx context.Context, reader client.Reader, namespace string, mine func(*ipamclaimsv1alpha1.IPAMClaim) bool) naming.ClaimNetwork {
	return func(name string) (string, bool, error) {
		var claim ipamclaimsv1alpha1.IPAMClaim
		err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &claim)
		switch {
		case apierrors.IsNotFound(err):
			return "", false, nil
		case err != nil:
			return "", false, fmt.Errorf("reading IPAMClaim %s/%s: %w", namespace, name, err)
		}
		if mine != nil && !mine(&claim) {
			return "", false, nil
		}
		return claim.Spec.Network, true, nil
	}
}

// ClaimOf names the claim of an owner's (a VM's, by name and UID)
// logical network on CNI network network: naming.ClaimFor over the claims
// of namespace, keeping ipam-extensions' name only for the owner's own.
// The claims controller, the guest network configuration and `kubectl
// ipkeeper why` name it so.
func ClaimOf(ctx context.Context, reader client.Reader, namespace, owner string, uid types.UID, logical, network string) (string, error) {
	return naming.ClaimFor(owner, logical, network, ClaimNetworks(ctx, reader, namespace), ownedBy(ctx, reader, namespace, claimowner.Owner{UID: uid}))
}

// LauncherClaimNetworks is OwnedClaimNetworks of the claims a launcher of
// vmi may use (claimowner's rule): the one filter the webhook and the
// agent choose a launcher's claim with.
func LauncherClaimNetworks(ctx context.Context, reader client.Reader, vmi *kubevirtv1.VirtualMachineInstance) naming.ClaimNetwork {
	l := claimowner.LauncherOf(vmi)
	return OwnedClaimNetworks(ctx, reader, vmi.Namespace, func(c *ipamclaimsv1alpha1.IPAMClaim) bool {
		owner, ok := claimowner.Of(c)
		return ok && owner.Runs(l)
	})
}
