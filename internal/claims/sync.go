// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// ownerSync is the create path shared by the VM and VMI reconcilers.
type ownerSync struct {
	claimWriter
	gate kubevirt.Gate
	// backoff spaces out retries of owners whose claim names are held by
	// someone else: the claim watch re-queues them as soon as the old claim
	// goes, so the retry is only a safety net and must not spin.
	backoff workqueue.TypedRateLimiter[reconcile.Request]
}

func newOwnerSync(c client.Client, recorder record.EventRecorder, gate kubevirt.Gate) *ownerSync {
	return &ownerSync{
		claimWriter: claimWriter{client: c, recorder: recorder},
		gate:        gate,
		backoff:     workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
	}
}

// sync creates the claims ownerObj needs for the networks of spec, with
// the addresses annotations (the VMI's, or the VM's template's) request.
func (s *ownerSync) sync(ctx context.Context, req reconcile.Request, ownerObj client.Object, owner claimowner.Owner, spec *kubevirtv1.VirtualMachineInstanceSpec, annotations map[string]string) (reconcile.Result, error) {
	enabled, err := s.gate.Enabled(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !enabled {
		log.FromContext(ctx).V(1).Info("PersistentIPs feature gate is off; not creating claims")
		s.backoff.Forget(req)
		return reconcile.Result{}, nil
	}
	want, problems, err := desiredClaims(ctx, owner.Name, ownerObj.GetNamespace(), kubevirt.SecondaryNetworks(spec), s.readNAD,
		ClaimNetworks(ctx, s.client, ownerObj.GetNamespace()))
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, p := range problems {
		nadProblems.Inc()
		s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonNADProblem), "no persistent IPs for %v", p)
	}
	want = withRequests(want, annotations)
	for _, d := range want {
		if d.Request != nil && d.Request.err != nil {
			s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonRequestInvalid), "network %q: %v", d.LogicalNetwork, d.Request.err)
			break // the same error for every network
		}
	}
	res, err := s.ensure(ctx, ownerObj, owner, want)
	if err != nil {
		return reconcile.Result{}, err
	}
	if res.conflicts > 0 || res.waiting > 0 {
		return reconcile.Result{RequeueAfter: s.backoff.When(req)}, nil
	}
	s.backoff.Forget(req)
	return reconcile.Result{}, nil
}

// readNAD reads a NAD from the cache and parses it.
func (s *ownerSync) readNAD(ctx context.Context, key types.NamespacedName) (multus.Network, error) {
	network, found, err := multus.ReadNAD(ctx, s.client, key)
	if err == nil && !found {
		return multus.Network{}, fmt.Errorf("NetworkAttachmentDefinition %s not found", key)
	}
	return network, err
}

// requestsForNAD maps a NAD to the owners (VMs or VMIs, by list) using it.
func requestsForNAD(c client.Client, newList func() client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}.String()
		if err := c.List(ctx, list, client.MatchingFields{indexNAD: key}); err != nil {
			log.FromContext(ctx).Error(err, "listing users of a NetworkAttachmentDefinition", "nad", key)
			return nil
		}
		return requestsOf(list)
	}
}

// requestsForAll maps an event (the KubeVirt CR changing) to every owner.
func requestsForAll(c client.Client, newList func() client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list); err != nil {
			log.FromContext(ctx).Error(err, "listing owners after a feature gate change")
			return nil
		}
		return requestsOf(list)
	}
}

// requestsForClaimOwner maps a claim to its owner's name, which is also how
// a claim held by a deleted VM re-queues the same-name VM waiting for it.
func requestsForClaimOwner(ctx context.Context, o client.Object) []reconcile.Request {
	if n, ok := claimowner.RecordedName(o); ok {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
	}
	return nil
}

func requestsOf(list client.ObjectList) []reconcile.Request {
	var reqs []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
	return reqs
}

// setupOwnerController registers the VM or VMI reconciler: the owner
// itself, claims (by owner name, which also brings back an owner waiting
// for a same-name claim to go), NADs (by the owners using them) and, when
// the gate is read from it, the KubeVirt CR (every owner, only when the gate changed).
func setupOwnerController(mgr ctrl.Manager, name string, owner client.Object, list func() client.ObjectList, watchKubeVirt bool, r reconcile.Reconciler) error {
	c := mgr.GetClient()
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(retry.Options()).
		For(owner).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, handler.EnqueueRequestsFromMapFunc(requestsForClaimOwner)).
		Watches(&nadv1.NetworkAttachmentDefinition{}, handler.EnqueueRequestsFromMapFunc(requestsForNAD(c, list)))
	if watchKubeVirt {
		b = b.Watches(&kubevirtv1.KubeVirt{}, handler.EnqueueRequestsFromMapFunc(requestsForAll(c, list)), builder.WithPredicates(kubevirt.GateChanged()))
	}
	return b.Complete(r)
}
