// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
)

// VMIReconciler creates the claims of standalone VMIs (VMIs no VM controls).
// A VM's VMI needs nothing here: the VM's claims are named after the VM,
// which is also the VMI's name.
type VMIReconciler struct {
	Client        client.Client
	Recorder      record.EventRecorder
	Gate          kubevirt.Gate
	Maker         Maker
	WatchKubeVirt bool
	// MaxRetention caps the address retention an owner asks for
	// (claimstatus.RetentionAnnotation).
	MaxRetention time.Duration

	sync *ownerSync
}

// Reconcile creates the missing claims of one standalone VMI.
func (r *VMIReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var vmi kubevirtv1.VirtualMachineInstance
	if err := r.Client.Get(ctx, req.NamespacedName, &vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading VirtualMachineInstance %s: %w", req, err)
	}
	if vmi.DeletionTimestamp != nil || claimowner.VMOf(&vmi) != nil {
		return reconcile.Result{}, nil
	}
	orphan, err := r.orphanedFromVM(ctx, &vmi)
	if err != nil || orphan {
		return reconcile.Result{}, err
	}
	owner := claimowner.Owner{Kind: claimowner.KindVMI, Name: vmi.Name, UID: vmi.UID}
	return r.sync.sync(ctx, req, &vmi, owner, &vmi.Spec, vmi.Annotations)
}

// orphanedFromVM reports whether this owner-less VMI is what orphan
// deletion left of a VM: the VM's claims (same names) stay with it until it
// is gone, so it must not ask for claims of its own.
func (r *VMIReconciler) orphanedFromVM(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (bool, error) {
	var claims ipamclaimsv1alpha1.IPAMClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(vmi.Namespace), client.MatchingFields{indexOwnerName: vmi.Name}); err != nil {
		return false, fmt.Errorf("listing claims of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	for i := range claims.Items {
		owner, ok := claimowner.Of(&claims.Items[i])
		if !ok || owner.Kind != claimowner.KindVM {
			continue
		}
		var vm kubevirtv1.VirtualMachine
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: owner.Name}, &vm)
		if apierrors.IsNotFound(err) || (err == nil && (vm.UID != owner.UID || vm.DeletionTimestamp != nil)) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading VirtualMachine %s/%s: %w", vmi.Namespace, owner.Name, err)
		}
	}
	return false, nil
}

// SetupWithManager registers the reconciler.
func (r *VMIReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.sync = newOwnerSync(r.Client, r.Recorder, r.Gate, r.Maker, r.MaxRetention)
	return setupOwnerController(mgr, "vmi-claims", &kubevirtv1.VirtualMachineInstance{},
		func() client.ObjectList { return &kubevirtv1.VirtualMachineInstanceList{} }, r.WatchKubeVirt, r.Maker, r)
}
