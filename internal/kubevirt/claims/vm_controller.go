// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
)

// VMReconciler creates a VM's claims as soon as the VM exists.
type VMReconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Gate     kubevirt.Gate
	// Maker tells whether another controller makes the claims; nil: ipkeeper.
	Maker Maker
	// WatchKubeVirt re-queues every VM when the KubeVirt CR changes, so
	// turning the gate on takes effect at once.
	WatchKubeVirt bool
	// MaxRetention caps the address retention an owner asks for
	// (claimstatus.RetentionAnnotation).
	MaxRetention time.Duration

	sync *ownerSync
}

// Reconcile creates the missing claims of one VM.
func (r *VMReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var vm kubevirtv1.VirtualMachine
	if err := r.Client.Get(ctx, req.NamespacedName, &vm); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading VirtualMachine %s: %w", req, err)
	}
	if vm.DeletionTimestamp != nil || vm.Spec.Template == nil {
		return reconcile.Result{}, nil
	}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: vm.Name, UID: vm.UID}
	return r.sync.sync(ctx, req, &vm, owner, &vm.Spec.Template.Spec, vm.Spec.Template.ObjectMeta.Annotations)
}

// SetupWithManager registers the reconciler.
func (r *VMReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.sync = newOwnerSync(r.Client, r.Recorder, r.Gate, r.Maker, r.MaxRetention)
	return setupOwnerController(mgr, "vm-claims", &kubevirtv1.VirtualMachine{},
		func() client.ObjectList { return &kubevirtv1.VirtualMachineList{} }, r.WatchKubeVirt, r.Maker, r)
}
