// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// ownerSync is the create path shared by the VM and VMI reconcilers.
type ownerSync struct {
	claimWriter
	gate  kubevirt.Gate
	maker Maker
	// backoff spaces out retries of owners whose claim names are held by
	// someone else: the claim watch re-queues them as soon as the old claim
	// goes, so the retry is only a safety net and must not spin.
	backoff workqueue.TypedRateLimiter[reconcile.Request]
	// gateOff remembers the owners told that the gate is off.
	gateOff *gateOffNotices
	// maxRetention caps the retention an owner asks for.
	maxRetention time.Duration
}

func newOwnerSync(c client.Client, recorder record.EventRecorder, gate kubevirt.Gate, maker Maker, maxRetention time.Duration) *ownerSync {
	return &ownerSync{
		claimWriter:  claimWriter{client: c, recorder: recorder},
		gate:         gate,
		maker:        maker,
		maxRetention: maxRetention,
		backoff:      workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		gateOff:      newGateOffNotices(time.Now),
	}
}

// sync creates the claims ownerObj needs for the networks of spec, with
// the addresses annotations (the VMI's, or the VM's template's) request.
func (s *ownerSync) sync(ctx context.Context, req reconcile.Request, ownerObj client.Object, owner claimowner.Owner, spec *kubevirtv1.VirtualMachineInstanceSpec, annotations map[string]string) (reconcile.Result, error) {
	if s.maker != nil && s.maker.External() {
		// Another controller makes the claims (and adds its finalizer):
		// creating or adopting them here would fight it.
		log.FromContext(ctx).V(1).Info("IPAMClaims are made by " + s.maker.Name() + "; not creating or adopting any")
		s.backoff.Forget(req)
		return reconcile.Result{}, nil
	}
	enabled, err := s.gate.Enabled(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !enabled {
		log.FromContext(ctx).V(1).Info("PersistentIPs feature gate is off; not creating claims")
		s.backoff.Forget(req)
		// Existing claims are left exactly as they are (package doc). The
		// owner is looked at again when the notice may be told anew (the
		// API server drops events after an hour by default).
		return reconcile.Result{RequeueAfter: gateOffNoticeInterval}, s.tellGateOff(ctx, ownerObj, owner, spec)
	}
	s.gateOff.reset()
	want, problems, err := desiredClaims(ctx, owner.Name, ownerObj.GetNamespace(), kubevirt.SecondaryNetworks(spec), s.readNAD,
		ClaimNetworks(ctx, s.client, ownerObj.GetNamespace()), ownedBy(ctx, s.client, ownerObj.GetNamespace(), owner))
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, p := range problems {
		nadProblems.Inc()
		s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonNADProblem), "no persistent IPs for %v", p)
	}
	want = withRequests(want, annotations, kubevirt.MadeByRestore(ownerObj.GetAnnotations()))
	for _, d := range want {
		if d.Request != nil && d.Request.err != nil {
			s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonRequestInvalid), "network %q: %v", d.LogicalNetwork, d.Request.err)
			break // the same error for every network
		}
	}
	if unknown, known := unknownRequestNetworks(annotations, spec.Networks); len(unknown) > 0 {
		names := "network " + unknown[0] + ", which this " + owner.Kind + " does not have"
		if len(unknown) > 1 {
			names = "networks " + strings.Join(unknown, ", ") + ", which this " + owner.Kind + " does not have"
		}
		s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonRequestInvalid),
			"annotation %s names %s (its networks: %s): no address is requested there; correct the name", RequestedAddressesAnnotation, names, strings.Join(known, ", "))
	}
	retention, refused := retentionOf(ownerObj.GetAnnotations(), s.maxRetention)
	if refused != nil && len(want) > 0 {
		s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonRetentionRefused), "%v", refused)
	}
	receiver := kubevirt.WaitsAsReceiver(ownerObj)
	for i := range want {
		want[i].Retention = retention
		want[i].Receiver = receiver
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

// ReasonPersistentIPsDisabled is the Warning event on a VM (or standalone
// VMI) that wants persistent IPs but gets no IPAMClaim because the gate is
// off; listed in docs/troubleshooting.md with the other reasons.
const ReasonPersistentIPsDisabled EventReason = "PersistentIPsDisabled"

// gateOffNoticeInterval is how long an owner told that the gate is off is
// not told again while the gate stays off: about the API server's default
// --event-ttl (1h), after which the first event has expired, so that a VM
// still without its claims still shows why.
const gateOffNoticeInterval = time.Hour

// tellGateOff warns, once (gateOffNotices), an owner that wants persistent
// IPs (desiredClaims: a network whose NAD allows them) and lacks a claim
// of its own for one of those networks, that it gets none while the gate
// is off. Owners with no such network, or with all their claims, are not
// told: nothing is missing for them. It writes nothing but the event.
func (s *ownerSync) tellGateOff(ctx context.Context, ownerObj client.Object, owner claimowner.Owner, spec *kubevirtv1.VirtualMachineInstanceSpec) error {
	if s.gateOff.told(owner.UID) {
		return nil
	}
	want, _, err := desiredClaims(ctx, owner.Name, ownerObj.GetNamespace(), kubevirt.SecondaryNetworks(spec), s.readNAD,
		ClaimNetworks(ctx, s.client, ownerObj.GetNamespace()), ownedBy(ctx, s.client, ownerObj.GetNamespace(), owner))
	if err != nil {
		return err
	}
	var missing []string
	for _, d := range want {
		var claim ipamclaimsv1alpha1.IPAMClaim
		err := s.client.Get(ctx, types.NamespacedName{Namespace: ownerObj.GetNamespace(), Name: d.Name}, &claim)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading IPAMClaim %s/%s: %w", ownerObj.GetNamespace(), d.Name, err)
		}
		if held, ok := claimowner.Of(&claim); err == nil && ok && held.UID == owner.UID {
			continue
		}
		missing = append(missing, fmt.Sprintf("%q", d.LogicalNetwork))
	}
	if len(missing) == 0 || !s.gateOff.tell(owner.UID) {
		return nil
	}
	networks := "network " + missing[0] + " allows persistent IPs but gets"
	if len(missing) > 1 {
		networks = "networks " + strings.Join(missing, ", ") + " allow persistent IPs but get"
	}
	gateOffWarnings.Inc()
	log.FromContext(ctx).Info("PersistentIPs feature gate is off; no IPAMClaim for networks that allow persistent IPs", "networks", missing)
	s.recorder.Eventf(ownerObj, corev1.EventTypeWarning, string(ReasonPersistentIPsDisabled),
		"%s no IPAMClaim: the %s feature gate is not listed in the KubeVirt CR (spec.configuration.developerConfiguration.featureGates), "+
			"so ipkeeper-controller creates no claims and this %s's launcher pods get addresses that do not persist. "+
			"List the gate there, or run ipkeeper-controller with --require-kubevirt-feature-gate=false; "+
			"where HCO manages KubeVirt, which reverts direct edits of the KubeVirt CR, use that flag or the HyperConverged CR's "+
			"kubevirt.kubevirt.io/jsonpatch annotation (docs/kubevirt.md)",
		networks, kubevirt.PersistentIPsGate, owner.Kind)
	return nil
}

// gateOffNotices remembers which owners were told that the gate is off,
// so that each is told once rather than at every reconcile (a running VM's
// status changes often), and again only after gateOffNoticeInterval. Its
// size is bounded by the owners told within that interval. The gate turned
// on forgets everything: turned off again, it is news again.
type gateOffNotices struct {
	now func() time.Time

	mu sync.Mutex
	// at is when each owner (by UID) was last told.
	at map[types.UID]time.Time
	// pruneAt is the size of at that triggers dropping expired entries.
	pruneAt int
}

const gateOffNoticesPruneMin = 1024

func newGateOffNotices(now func() time.Time) *gateOffNotices {
	return &gateOffNotices{now: now, at: map[types.UID]time.Time{}, pruneAt: gateOffNoticesPruneMin}
}

// told reports whether uid was told within the interval.
func (n *gateOffNotices) told(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := n.at[uid]
	return ok && n.now().Sub(at) < gateOffNoticeInterval
}

// tell records that uid is told now; false if another reconcile just did.
func (n *gateOffNotices) tell(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if at, ok := n.at[uid]; ok && now.Sub(at) < gateOffNoticeInterval {
		return false
	}
	n.at[uid] = now
	if len(n.at) >= n.pruneAt {
		for k, at := range n.at {
			if now.Sub(at) >= gateOffNoticeInterval {
				delete(n.at, k)
			}
		}
		n.pruneAt = max(gateOffNoticesPruneMin, 2*len(n.at))
	}
	return true
}

// reset forgets every owner told: the gate is on.
func (n *gateOffNotices) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.at) > 0 {
		n.at = map[types.UID]time.Time{}
		n.pruneAt = gateOffNoticesPruneMin
	}
}

// ownedBy reads, for naming.ClaimFor, only the claims owner holds.
func ownedBy(ctx context.Context, c client.Reader, namespace string, owner claimowner.Owner) naming.ClaimNetwork {
	return OwnedClaimNetworks(ctx, c, namespace, func(claim *ipamclaimsv1alpha1.IPAMClaim) bool {
		held, ok := claimowner.Of(claim)
		return ok && held.UID == owner.UID
	})
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
func setupOwnerController(mgr ctrl.Manager, name string, owner client.Object, list func() client.ObjectList, watchKubeVirt bool, maker Maker, r reconcile.Reconciler) error {
	c := mgr.GetClient()
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(retry.Options()).
		For(owner).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, handler.EnqueueRequestsFromMapFunc(requestsForClaimOwner)).
		Watches(&nadv1.NetworkAttachmentDefinition{}, handler.EnqueueRequestsFromMapFunc(requestsForNAD(c, list)))
	if maker != nil {
		// When the maker changes, every owner is looked at again (claims
		// another controller made are adopted when ipkeeper takes over).
		b = b.WatchesRawSource(source.Channel(maker.Listen(), handler.EnqueueRequestsFromMapFunc(requestsForAll(c, list))))
	}
	if watchKubeVirt {
		b = b.Watches(&kubevirtv1.KubeVirt{}, handler.EnqueueRequestsFromMapFunc(requestsForAll(c, list)), builder.WithPredicates(kubevirt.GateChanged()))
	}
	return b.Complete(r)
}
