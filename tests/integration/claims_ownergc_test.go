// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestOwnerReferenceGarbageCollection proves kube-controller-manager's
// garbage collector runs: an IPAMClaim owned by a KubeVirt VirtualMachine
// is collected after the VM is deleted, and a dependent of a
// built-in owner too. Without the garbage collector both would stay forever.
func TestOwnerReferenceGarbageCollection(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "gc")

	// A stopped VM, as a user creates it (virt-controller only adds its
	// finalizer, which it removes on deletion: the VM has no VMI).
	vm := framework.NewVM(ns, "vm1")
	if err := cp.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "vm1.blue", Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm,
				schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"})},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "pod16477688c0e"},
	}
	if err := cp.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}

	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns}}
	if err := cp.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "dependent", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(true),
		}},
	}}
	if err := cp.Client.Create(ctx, dependent); err != nil {
		t.Fatal(err)
	}

	// Both still exist while their owners do.
	for _, obj := range []client.Object{claim, dependent} {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatalf("dependent %s gone before its owner was deleted: %v", obj.GetName(), err)
		}
	}

	if err := cp.Client.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{claim, dependent} {
		err := framework.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			err := cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("%s/%s not garbage-collected after its owner was deleted: %v", obj.GetNamespace(), obj.GetName(), err)
		}
	}
}

// TestForegroundDeletionWaitsForDependents: with foreground propagation the
// owner stays (with the foregroundDeletion finalizer) until the garbage
// collector has deleted its blocking dependents. The claims controller's
// deletion handling depends on this behaviour.
func TestForegroundDeletionWaitsForDependents(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "gc-fg")
	vm := framework.NewVM(ns, "vm1")
	if err := cp.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "vm1.blue", Namespace: ns,
			// A finalizer stands in for a controller that has not released the claim yet.
			Finalizers: []string{"ipkeeper.io/test-hold"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm,
				schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"})},
		},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "net1"},
	}
	if err := cp.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, vm, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	// The GC deletes the claim (sets deletionTimestamp); the finalizer holds it and so the VM.
	if err := framework.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim)
		return err == nil && claim.DeletionTimestamp != nil, err
	}); err != nil {
		t.Fatalf("claim not marked for deletion by foreground propagation: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		t.Fatalf("VM gone while a blocking dependent remains: %v", err)
	}
	claim.Finalizers = nil
	if err := cp.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm)
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("VM not deleted after its dependent released: %v", err)
	}
}
