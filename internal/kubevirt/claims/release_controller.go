// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// ClaimReleaser releases claims nobody needs any more.
//
// A claim must go when its owner is gone or being deleted (any propagation
// policy, including orphan, which strips the owner reference), or when its
// network left the owner's spec (hot-unplug). It may go only once no VMI of
// that owner and no pod referencing the claim remains, since a running or
// migrating VM still holds the addresses. Both facts are confirmed with live
// reads before the claim is deleted.
//
// Release deletes first and removes the finalizer second, in a later pass
// whose live reads come after the delete (release): until the finalizer is
// off, the claim still exists and is ours, so a failed step or a crash in
// between is found again (by the deletion event, the sweep at start-up and
// the periodic resync). Claims that carry our label but lost
// the finalizer (removed by hand) are deleted all the same.
type ClaimReleaser struct {
	Client client.Client
	// APIReader reads from the API server, bypassing the cache.
	APIReader client.Reader
	Recorder  record.EventRecorder
	// Maker tells whether another controller makes (and releases) claims:
	// then only claims carrying ipkeeper's label are released here.
	Maker Maker
	// ResyncPeriod is how often every claim of ours is looked at again even
	// without an event; 0 turns the resync off.
	ResyncPeriod time.Duration
	// Retainer keeps a released claim's addresses for its retention
	// (claimstatus.RetentionAnnotation); nil keeps none.
	Retainer *Retainer
}

type ownerState int

const (
	ownerLive ownerState = iota
	ownerDeleting
	ownerGone
)

// Reconcile releases one claim if it is no longer needed.
func (r *ClaimReleaser) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := r.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading IPAMClaim %s: %w", req, err)
	}
	if claim.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(&claim, Finalizer) {
		// Released: by us in an earlier pass, or by another controller that
		// removed Finalizer (ipam-extensions, which treats every claim of a
		// deleted VM as its own). Only its retention is left to apply.
		return reconcile.Result{}, r.retainReleased(ctx, &claim)
	}
	owner, ok := claimowner.Of(&claim)
	if !ok || !r.isOurs(&claim) {
		return reconcile.Result{}, nil
	}
	logger := log.FromContext(ctx).WithValues("owner", owner.String())

	// Cheap pass on the cache first; only a claim that looks releasable
	// costs live reads.
	state, ownerObj, err := r.ownerState(ctx, r.Client, claim.Namespace, owner)
	if err != nil {
		return reconcile.Result{}, err
	}
	if state == ownerLive && claim.DeletionTimestamp == nil && wanted(ctx, r.Client, ownerObj, owner, &claim) {
		return reconcile.Result{}, nil
	}
	if users, err := r.users(ctx, r.Client, &claim, owner, state); err != nil || users != "" {
		if users != "" {
			logger.V(1).Info("claim still in use; keeping it", "claim", claim.Name, "user", users)
		}
		return reconcile.Result{}, err
	}

	state, ownerObj, err = r.ownerState(ctx, r.APIReader, claim.Namespace, owner)
	if err != nil {
		return reconcile.Result{}, err
	}
	if state == ownerLive && claim.DeletionTimestamp == nil && wanted(ctx, r.APIReader, ownerObj, owner, &claim) {
		return reconcile.Result{}, nil // the cache was behind
	}
	users, err := r.users(ctx, r.APIReader, &claim, owner, state)
	if err != nil || users != "" {
		if strings.HasSuffix(users, attaching) {
			// Nothing else brings the claim back once Multus reports the
			// launcher's interfaces, unless the launcher references it.
			return reconcile.Result{RequeueAfter: attachingRecheck}, err
		}
		return reconcile.Result{}, err
	}
	return r.release(ctx, &claim, ownerObj)
}

// releaseRecheck is when a claim this controller deleted is looked at
// again, should its deletion's event not bring it back first.
const releaseRecheck = time.Second

// release deletes the claim; a later pass, whose live reads come after the
// delete, removes the finalizer that held it. A launcher pod created
// between this pass's reads and the delete (the VM swapped back to the
// claim's network, a migration target referencing the claim while it still
// existed) may have attached with the claim's addresses before the delete
// landed: that later pass finds it and keeps the claim, and so its
// addresses, until it ends. An ADD after the delete finds the claim being
// deleted (the agent reads it consistently) and waits for it made again.
// The IPAM's reservations are released by the reservation garbage
// collector once the claim is gone; those of a claim with a retention are
// retired for it here first (Retainer), while the finalizer still holds
// the claim, so that a failure is retried.
func (r *ClaimReleaser) release(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, ownerObj client.Object) (reconcile.Result, error) {
	if claim.DeletionTimestamp == nil {
		uid := claim.UID
		if err := r.Client.Delete(ctx, claim, client.Preconditions{UID: &uid}); err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, fmt.Errorf("deleting IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		log.FromContext(ctx).V(1).Info("deleted IPAMClaim; its finalizer comes off once live reads after the delete find no user", "claim", claim.Name)
		return reconcile.Result{RequeueAfter: releaseRecheck}, nil
	}
	kept, err := r.Retainer.retain(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := removeFinalizers(ctx, r.Client, claim, Finalizer, RetentionFinalizer); err != nil {
		return reconcile.Result{}, err
	}
	claimsReleased.Inc()
	log.FromContext(ctx).Info("released IPAMClaim", "claim", claim.Name, "ips", claim.Status.IPs, "keptFor", kept)
	if ownerObj != nil {
		why := "no launcher pod uses it any more"
		if kept > 0 {
			why += fmt.Sprintf("; its addresses are kept for a claim of the same name for %s (%s)", kept, claimstatus.RetentionAnnotation)
		}
		r.Recorder.Eventf(ownerObj, corev1.EventTypeNormal, string(ReasonClaimDeleted),
			"deleted IPAMClaim %s (network %q, addresses %v): %s", claim.Name, claim.Annotations[NetworkAnnotation], claim.Status.IPs, why)
	}
	return reconcile.Result{}, nil
}

// retainReleased applies the retention of a claim released without it
// (RetentionFinalizer still on, Finalizer gone), then lets the claim go.
func (r *ClaimReleaser) retainReleased(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	if !controllerutil.ContainsFinalizer(claim, RetentionFinalizer) {
		return nil
	}
	kept, err := r.Retainer.retain(ctx, claim)
	if err != nil {
		return err
	}
	if err := removeFinalizers(ctx, r.Client, claim, RetentionFinalizer); err != nil {
		return err
	}
	log.FromContext(ctx).Info("applied the retention of an IPAMClaim released by another controller", "claim", claim.Name, "ips", claim.Status.IPs, "keptFor", kept)
	return nil
}

// removeFinalizers removes the named finalizers the claim holds with a
// JSON patch that first tests each is still at the index we saw: no
// resourceVersion is needed (the delete just changed it) and no other
// finalizer is touched.
func removeFinalizers(ctx context.Context, c client.Client, claim *ipamclaimsv1alpha1.IPAMClaim, names ...string) error {
	var ops []string
	// From the last index down, so that each removal leaves the indexes
	// of those still to come as they were.
	for i := len(claim.Finalizers) - 1; i >= 0; i-- {
		if f := claim.Finalizers[i]; slices.Contains(names, f) {
			ops = append(ops, fmt.Sprintf(`{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}`, i, f, i))
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if err := c.Patch(ctx, claim, client.RawPatch(types.JSONPatchType, []byte("["+strings.Join(ops, ",")+"]"))); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing finalizers %v from IPAMClaim %s/%s: %w", names, claim.Namespace, claim.Name, err)
	}
	return nil
}

// isOurs reports whether this controller releases the claim: it holds our
// finalizer or our label (a claim whose finalizer was removed by hand).
//
// While another controller makes claims (Maker), a claim holding the
// finalizer without our label is that controller's (ipam-extensions uses
// the same finalizer name) and it releases it. The events of every claim
// that may be ours either way reach Reconcile (mayBeOurs), which decides:
// the maker can change between an event and its reconcile, and a change
// re-queues them all.
func (r *ClaimReleaser) isOurs(o client.Object) bool {
	if claimowner.Managed(o) {
		return true
	}
	return controllerutil.ContainsFinalizer(o, Finalizer) && (r.Maker == nil || !r.Maker.External())
}

// mayBeOurs is isOurs whoever makes claims: the events Reconcile sees.
func mayBeOurs(o client.Object) bool {
	return claimowner.Managed(o) || controllerutil.ContainsFinalizer(o, Finalizer) || controllerutil.ContainsFinalizer(o, RetentionFinalizer)
}

// ownerState reads the owner through reader. ownerObj is returned when the
// owner still exists (live or being deleted), for events.
func (r *ClaimReleaser) ownerState(ctx context.Context, reader client.Reader, namespace string, owner claimowner.Owner) (ownerState, client.Object, error) {
	var obj client.Object = &kubevirtv1.VirtualMachine{}
	if owner.Kind == claimowner.KindVMI {
		obj = &kubevirtv1.VirtualMachineInstance{}
	}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: owner.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return ownerGone, nil, nil
		}
		return ownerLive, nil, fmt.Errorf("reading %s: %w", owner, err)
	}
	switch {
	case obj.GetUID() != owner.UID:
		return ownerGone, nil, nil
	case obj.GetDeletionTimestamp() != nil:
		return ownerDeleting, obj, nil
	}
	return ownerLive, obj, nil
}

// wanted reports whether the live owner's spec still has the claim's
// network (claimWanted), reading NADs through reader, and the claim was
// not handed over.
func wanted(ctx context.Context, reader client.Reader, ownerObj client.Object, owner claimowner.Owner, claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	if claim.Annotations[claimstatus.HandedOverAnnotation] != "" {
		// Its part in a decentralized live migration is over (package
		// handover): released once unused, and made anew.
		return false
	}
	var spec *kubevirtv1.VirtualMachineInstanceSpec
	switch o := ownerObj.(type) {
	case *kubevirtv1.VirtualMachine:
		if o.Spec.Template != nil {
			spec = &o.Spec.Template.Spec
		}
	case *kubevirtv1.VirtualMachineInstance:
		spec = &o.Spec
	}
	networkOf := func(multusNetworkName string) (string, bool) {
		key, err := multus.NADRef(multusNetworkName, claim.Namespace)
		if err != nil {
			return "", false
		}
		n, found, err := multus.ReadNAD(ctx, reader, key)
		return n.Name, err == nil && found
	}
	return claimWanted(kubevirt.SecondaryNetworks(spec), owner.Name, claim, networkOf)
}

// users names something still using the claim ("" when nothing does): a
// pod whose networks annotation references it (running, starting or
// terminating: it may hold the addresses; not one whose containers ended
// for good) or, once the owner is going, a VMI
// of that owner (it may start a launcher pod, for example a migration target).
//
// Pods come from the cache's claim-reference index. A live pass (reader is
// the API reader) also lists the owner's launcher pods, which is where a
// pod the cache has not seen yet would come from (virt-controller creating
// a launcher pod): by kubevirt.io/created-by, the UID of the owner's VMI
// (the vm.kubevirt.io/name label is the VMI's hostname, which spec.hostname
// changes), and by that name label for launchers of a VMI already gone. It
// attaching ends the user a launcher whose interfaces Multus has not
// reported yet is told as; such a claim is judged again attachingRecheck
// later, when the report is likely there.
const (
	attaching        = " (its interfaces are not reported yet)"
	attachingRecheck = 2 * time.Second
)

// never lists the whole namespace.
func (r *ClaimReleaser) users(ctx context.Context, reader client.Reader, claim *ipamclaimsv1alpha1.IPAMClaim, owner claimowner.Owner, state ownerState) (string, error) {
	pods, err := podrefs.Referencing(ctx, r.Client, claim.Namespace, claim.Name)
	if err != nil {
		return "", err
	}
	// Launchers of the owner, from the live pass: while another controller
	// makes claims its webhook rewrites launchers' references (to its own
	// names, on any update), so a reference no longer proves which claim a
	// running interface holds; then every running launcher of the owner
	// keeps every claim of the owner.
	launchersFrom := len(pods)
	anyLauncher := r.Maker != nil && r.Maker.External()
	if reader != r.Client {
		selectors := []client.MatchingLabels{{kubevirt.VMINameLabel: owner.Name}}
		var vmi kubevirtv1.VirtualMachineInstance
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: owner.Name}, &vmi); {
		case err == nil:
			selectors = append(selectors, client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)})
		case !apierrors.IsNotFound(err):
			return "", fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", claim.Namespace, owner.Name, err)
		}
		for _, sel := range selectors {
			launchers := podrefs.MetadataList()
			if err := reader.List(ctx, launchers, client.InNamespace(claim.Namespace), sel); err != nil {
				return "", fmt.Errorf("listing launcher pods of %s: %w", owner, err)
			}
			pods = append(pods, launchers.Items...)
		}
	}
	for i := range pods {
		p := &pods[i]
		ownLauncher := i >= launchersFrom && owner.RunsPod(p)
		launcher := ownLauncher && anyLauncher
		unreported := false
		if ownLauncher && !launcher {
			held, err := r.holdsAddressOf(ctx, p, claim)
			if err != nil {
				return "", err
			}
			launcher = held
			// The owner is there and Multus has not reported this
			// launcher's interfaces yet: its ADDs may be taking this
			// claim's addresses right now, whatever its references say (a
			// VM swapped back and forth).
			unreported = state == ownerLive && !held && p.Annotations[nadv1.NetworkStatusAnnot] == ""
		}
		if !launcher && !unreported && !slices.Contains(multus.ClaimRefs(p.Annotations[multus.Annotation], p.Namespace), claim.Name) {
			continue
		}
		ended, err := r.ended(ctx, p)
		if err != nil {
			return "", err
		}
		switch {
		case ended:
		case unreported:
			return "pod " + p.Name + attaching, nil
		default:
			return "pod " + p.Name, nil
		}
	}
	if state == ownerLive {
		return "", nil
	}
	var vmi kubevirtv1.VirtualMachineInstance
	err = reader.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: owner.Name}, &vmi)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", claim.Namespace, owner.Name, err)
	}
	if owner.HasVMI(&vmi) {
		return "VirtualMachineInstance " + vmi.Name, nil
	}
	return "", nil
}

// holdsAddressOf reports whether a launcher's network-status (written by
// Multus when it attaches an interface, and by its dynamic networks
// controller on a hotplug or unplug) lists an address of the claim on a
// NAD of the claim's network: the interface is attached with it, whatever
// the launcher's networks annotation references now (another IPAMClaims
// controller's webhook rewrites references of running launchers). Two
// networks may use the same addresses, so the NAD's network is compared.
func (r *ClaimReleaser) holdsAddressOf(ctx context.Context, p *metav1.PartialObjectMetadata, claim *ipamclaimsv1alpha1.IPAMClaim) (bool, error) {
	raw := p.Annotations[nadv1.NetworkStatusAnnot]
	if raw == "" || !claimstatus.Filled(claim) {
		return false, nil
	}
	var statuses []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
		return false, nil // Multus' to write well; references still count
	}
	for _, st := range statuses {
		if !slices.ContainsFunc(st.IPs, func(ip string) bool {
			addr, err := netip.ParseAddr(ip)
			return err == nil && claimstatus.Records(claim, addr)
		}) {
			continue
		}
		key, err := multus.NADRef(st.Name, p.Namespace)
		if err != nil {
			continue // the pod network, or a name that is not a NAD's
		}
		network, found, err := multus.ReadNAD(ctx, r.Client, key)
		var nadErr *multus.NADError
		switch {
		case errors.As(err, &nadErr):
			continue // a NAD that does not parse names no network
		case err != nil:
			return false, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
		}
		if found && (claim.Spec.Network == "" || network.Name == claim.Spec.Network) {
			return true, nil
		}
	}
	return false, nil
}

// ended reports, from a live read, whether a pod's containers ended for
// good (phase Succeeded or Failed) or the pod is gone. KubeVirt keeps such
// launcher pods until their VMI goes (a live migration's source after the
// hand-over, the target of a failed one), but their sandbox is torn down and
// they never run again: they hold no address. The watch carries only pod
// metadata, so the phase is read for the few pods that reference a claim
// about to be released.
func (r *ClaimReleaser) ended(ctx context.Context, p *metav1.PartialObjectMetadata) (bool, error) {
	var pod corev1.Pod
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if pod.UID != p.UID {
		return true, nil // a newer pod of that name, listed on its own
	}
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
}

// SetupWithManager registers the reconciler.
func (r *ClaimReleaser) SetupWithManager(mgr ctrl.Manager) error {
	byOwnerName := func(ctx context.Context, o client.Object) []reconcile.Request {
		var claims ipamclaimsv1alpha1.IPAMClaimList
		if err := r.Client.List(ctx, &claims, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexOwnerName: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing claims by owner name", "name", o.GetName())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(claims.Items))
		for i := range claims.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&claims.Items[i])})
		}
		return reqs
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("claim-release").
		WithOptions(retry.Options()).
		For(&ipamclaimsv1alpha1.IPAMClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(mayBeOurs))).
		Watches(&kubevirtv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(byOwnerName)).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(byOwnerName)).
		WatchesMetadata(podrefs.Metadata(), handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, pod client.Object) []reconcile.Request {
			reqs := podrefs.ClaimRequests(ctx, pod)
			// A launcher keeps its owner's claims while it holds their
			// addresses, referencing them or not (one created while the
			// webhook was down has no reference, users): its end must bring
			// them back too, or a deleted VM's claim waits for the resync.
			if name := pod.GetLabels()[kubevirt.VMINameLabel]; name != "" {
				owner := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: pod.GetNamespace(), Name: name}}
				reqs = append(reqs, byOwnerName(ctx, owner)...)
			}
			return reqs
		}))
	if r.Maker != nil {
		// Claims another controller made become ours when it goes.
		b = b.WatchesRawSource(source.Channel(r.Maker.Listen(), handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			var list ipamclaimsv1alpha1.IPAMClaimList
			if err := r.Client.List(ctx, &list); err != nil {
				log.FromContext(ctx).Error(err, "listing claims after the claims maker changed")
				return nil
			}
			var reqs []reconcile.Request
			for i := range list.Items {
				if mayBeOurs(&list.Items[i]) {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
			return reqs
		})))
	}
	if r.ResyncPeriod > 0 {
		resync := make(chan event.GenericEvent)
		if err := mgr.Add(&claimResync{client: r.Client, period: r.ResyncPeriod, out: resync}); err != nil {
			return fmt.Errorf("adding the claim resync: %w", err)
		}
		b = b.WatchesRawSource(source.Channel(resync, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// claimResync offers every claim carrying our label to the release
// controller once per period: a safety net for a release that no event
// brings back (its error budget exhausted, a claim changed behind our back).
// It runs on the leader only, as the controller does.
type claimResync struct {
	client client.Client
	period time.Duration
	out    chan<- event.GenericEvent
}

func (s *claimResync) Start(ctx context.Context) error {
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var list ipamclaimsv1alpha1.IPAMClaimList
		if err := s.client.List(ctx, &list, client.MatchingLabels{claimowner.ManagedByLabel: claimowner.ManagedByValue}); err != nil {
			log.FromContext(ctx).Error(err, "listing claims for the periodic resync")
			continue
		}
		for i := range list.Items {
			select {
			case s.out <- event.GenericEvent{Object: &list.Items[i]}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}
