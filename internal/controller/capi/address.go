// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// addressConflict is an IPAddress that is in the claim's way: another
// claim's, or not the address the claim holds. The claim reports it and
// waits.
type addressConflict struct{ msg string }

func (e *addressConflict) Error() string { return e.msg }

// ensureAddress makes sure the IPAddress of claim exists with ip: named
// like the claim, owned by it (controller) and by the pool, with the
// contract's protect finalizer; prefix and gateway from ip's range. An
// IPAddress is immutable: one that exists is checked, never changed.
func (r *AddressClaimReconciler) ensureAddress(ctx context.Context, claim *ipamv1.IPAddressClaim, pool *v1alpha1.IPPool, ip netip.Addr, rng iprange.Range) error {
	addr := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name, Finalizers: []string{ProtectFinalizer}},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
			PoolRef:  claim.Spec.PoolRef,
			Address:  ip.String(),
			Prefix:   ptr.To(int32(rng.Subnet().Bits())), //nolint:gosec // a prefix length, 0..128
		},
	}
	if gw := rng.Gateway(); gw.IsValid() {
		addr.Spec.Gateway = gw.String()
	}
	if err := controllerutil.SetControllerReference(claim, addr, r.Client.Scheme()); err != nil {
		return fmt.Errorf("owning IPAddress %s/%s by its claim: %w", addr.Namespace, addr.Name, err)
	}
	addr.OwnerReferences = append(addr.OwnerReferences, metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: PoolKind, Name: pool.Name, UID: pool.UID,
		BlockOwnerDeletion: ptr.To(true),
	})
	err := r.Client.Create(ctx, addr)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating IPAddress %s/%s: %w", addr.Namespace, addr.Name, err)
	}
	cur := &ipamv1.IPAddress{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(addr), cur); err != nil {
		return fmt.Errorf("reading IPAddress %s/%s: %w", addr.Namespace, addr.Name, err)
	}
	if !metav1.IsControlledBy(cur, claim) {
		return &addressConflict{fmt.Sprintf("IPAddress %s exists and is not this claim's (a previous claim of this name may still be deleting it)", cur.Name)}
	}
	if cur.Spec.Address != addr.Spec.Address {
		return &addressConflict{fmt.Sprintf("IPAddress %s has address %s, but the claim holds %s in pool %s", cur.Name, cur.Spec.Address, addr.Spec.Address, pool.Name)}
	}
	if controllerutil.AddFinalizer(cur, ProtectFinalizer) {
		if err := r.Client.Update(ctx, cur); err != nil {
			return fmt.Errorf("adding finalizer %s to IPAddress %s/%s: %w", ProtectFinalizer, cur.Namespace, cur.Name, err)
		}
	}
	return nil
}

// claimAddress reads the IPAddress of claim live; nil when there is none
// or it is not the claim's.
func (r *AddressClaimReconciler) claimAddress(ctx context.Context, claim *ipamv1.IPAddressClaim) (*ipamv1.IPAddress, error) {
	addr := &ipamv1.IPAddress{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Name}, addr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading IPAddress %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	if !metav1.IsControlledBy(addr, claim) {
		return nil, nil
	}
	return addr, nil
}

// cachedClaimAddress is the IPAddress of claim from the cache, else read
// live (the cache may not show one just made); nil when there is none or
// it is not the claim's. Its spec.address never changes, so a cached copy
// is as good as a live one.
func (r *AddressClaimReconciler) cachedClaimAddress(ctx context.Context, claim *ipamv1.IPAddressClaim) (*ipamv1.IPAddress, error) {
	addr := &ipamv1.IPAddress{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Name}, addr)
	switch {
	case err == nil && metav1.IsControlledBy(addr, claim):
		return addr, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading IPAddress %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return r.claimAddress(ctx, claim)
}

// deleteAddress takes the protect finalizer off the claim's IPAddress and
// deletes it.
func (r *AddressClaimReconciler) deleteAddress(ctx context.Context, addr *ipamv1.IPAddress) error {
	if controllerutil.RemoveFinalizer(addr, ProtectFinalizer) {
		if err := r.Client.Update(ctx, addr); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing finalizer %s from IPAddress %s/%s: %w", ProtectFinalizer, addr.Namespace, addr.Name, err)
		}
	}
	uid := addr.UID
	if err := r.Client.Delete(ctx, addr, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting IPAddress %s/%s: %w", addr.Namespace, addr.Name, err)
	}
	return nil
}
