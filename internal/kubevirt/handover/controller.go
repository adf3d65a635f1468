// SPDX-License-Identifier: Apache-2.0

package handover

import (
	"context"
	"errors"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// EventReason is the reason of an Event on a receiver VM.
type EventReason string

// The Event reasons, listed in docs/troubleshooting.md.
const (
	// The source's addresses were lent to the receiver, or passed to it.
	ReasonLent       EventReason = "AddressesLentByMigrationSource"
	ReasonHandedOver EventReason = "AddressesHandedOver"
	// The migration failed: the source keeps its addresses.
	ReasonTakenBack EventReason = "AddressesTakenBack"
	// The receiver's claim gets addresses of its own, and why.
	ReasonNotHandedOver EventReason = "AddressesNotHandedOver"
)

// Values of claimstatus.ReceiverAnnotation other than waiting.
const (
	receivedValue = "received"
	ownPrefix     = "own-addresses: "
)

// waitRetry is how soon a receiver is looked at again while its source's
// claim has no addresses yet.
const waitRetry = 2 * time.Second

// Reconciler hands a VM's addresses over to its receiver, one receiver VM
// (namespace/name) at a time. It runs on the leader only.
type Reconciler struct {
	// Client reads VMs, VMIs, migrations and claims from the KubeVirt
	// manager's cache and writes claims' metadata.
	Client client.Client
	// Reservations reads reservations from the main manager's cache (its
	// owner and lentTo indexes) and writes them.
	Reservations client.Client
	// ReservationCache is the main manager's cache, whose reservation
	// events bring receivers back.
	ReservationCache cache.Cache
	Recorder         record.EventRecorder
}

// receiverClaim is a claim of the receiver VM and what is lent to it.
type receiverClaim struct {
	claim *ipamclaimsv1alpha1.IPAMClaim
	lent  []ipkeeperv1alpha1.IPReservation
}

// Reconcile moves one receiver's handover a step on.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var vmi *kubevirtv1.VirtualMachineInstance
	var got kubevirtv1.VirtualMachineInstance
	switch err := r.Client.Get(ctx, req.NamespacedName, &got); {
	case err == nil:
		vmi = &got
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading VirtualMachineInstance %s: %w", req, err)
	}
	mine, err := r.receiverClaims(ctx, req.Namespace, req.Name)
	if err != nil || len(mine) == 0 {
		return reconcile.Result{}, err
	}
	receive, err := ReceivingMigration(ctx, r.Client, req.Namespace, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch PhaseOf(vmi, receive) {
	case Succeeded:
		return reconcile.Result{}, r.pass(ctx, req, mine)
	case Failed:
		return reconcile.Result{}, r.takeBack(ctx, mine)
	case Running:
		return r.lend(ctx, vmi, receive, mine)
	}
	// Unsynced: the claims wait. What is lent stays lent: a receiver's
	// migration state is only reset by a new attempt, which either
	// synchronises the same source again or fails.
	return reconcile.Result{}, nil
}

// receiverClaims lists the claims of the VM that were made to receive
// (claimstatus.ReceiverAnnotation) or have addresses lent to them.
func (r *Reconciler) receiverClaims(ctx context.Context, namespace, vm string) ([]receiverClaim, error) {
	list, err := claims.ClaimsOf(ctx, r.Client, namespace, vm)
	if err != nil {
		return nil, err
	}
	var out []receiverClaim
	for i := range list {
		c := &list[i]
		if owner, ok := claimowner.Of(c); !ok || owner.Kind != claimowner.KindVM || c.DeletionTimestamp != nil {
			continue
		}
		lent, err := reservationindex.LentTo(ctx, r.Reservations, c.UID)
		if err != nil {
			return nil, err
		}
		if len(lent) > 0 || c.Annotations[claimstatus.ReceiverAnnotation] == claimstatus.ReceiverWaiting {
			out = append(out, receiverClaim{claim: c, lent: lent})
		}
	}
	return out, nil
}

// lend lends each waiting claim of a running receiver the addresses of
// its source's claim of the same network, or, where there is none to
// lend, lets the claim get addresses of its own, saying why.
func (r *Reconciler) lend(ctx context.Context, receiver *kubevirtv1.VirtualMachineInstance, receive *kubevirtv1.VirtualMachineInstanceMigration, mine []receiverClaim) (reconcile.Result, error) {
	j, err := Judge(ctx, r.Client, receiver, receive)
	if err != nil {
		return reconcile.Result{}, err
	}
	var sourceClaims []ipamclaimsv1alpha1.IPAMClaim
	if j.Source != nil {
		if vm := claimowner.VMOf(j.Source); vm != nil {
			if sourceClaims, err = claims.ClaimsOf(ctx, r.Client, j.Source.Namespace, vm.Name); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	var result reconcile.Result
	var errs []error
	for _, rc := range mine {
		c := rc.claim
		if c.Annotations[claimstatus.ReceiverAnnotation] != claimstatus.ReceiverWaiting || (claimstatus.Filled(c) && len(rc.lent) == 0) {
			continue
		}
		switch {
		case j.Remote:
			errs = append(errs, r.ownAddresses(ctx, c, "the migration's source is not in this cluster"))
			continue
		case j.Refused != "":
			// Not trusted (or a stale state from an earlier attempt, which
			// the next sync replaces): it keeps waiting, holding nothing.
			r.Recorder.Eventf(ownerVM(c), corev1.EventTypeWarning, string(ReasonNotHandedOver),
				"IPAMClaim %s keeps waiting: the migration's source is not trusted: %s", c.Name, j.Refused)
			continue
		}
		src := sourceClaimOf(sourceClaims, c)
		if src == nil {
			errs = append(errs, r.ownAddresses(ctx, c, fmt.Sprintf("the source VM has no IPAMClaim of network %q on CNI network %q",
				c.Annotations[claimstatus.LogicalNetworkAnnotation], c.Spec.Network)))
			continue
		}
		if !claimstatus.Filled(src) {
			result.RequeueAfter = waitRetry
			continue
		}
		lent, err := r.lendClaim(ctx, src, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if lent > 0 {
			r.Recorder.Eventf(ownerVM(c), corev1.EventTypeNormal, string(ReasonLent),
				"IPAMClaim %s: the migration source's %s lent to it while the VM moves here (decentralized live migration)", c.Name, claimsAddresses(src))
		}
	}
	return result, errors.Join(errs...)
}

// lendClaim lends every address src holds to dst; it returns how many it
// lent now.
func (r *Reconciler) lendClaim(ctx context.Context, src, dst *ipamclaimsv1alpha1.IPAMClaim) (int, error) {
	held, err := reservationindex.ByOwner(ctx, r.Reservations, src.UID)
	if err != nil {
		return 0, err
	}
	to := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: dst.Namespace, Name: dst.Name, UID: dst.UID}
	n := 0
	for i := range held {
		res := &held[i]
		switch {
		case res.Spec.Released() || res.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim:
			continue
		case res.Spec.LentTo != nil && res.Spec.LentTo.UID == dst.UID:
			continue
		case res.Spec.LentTo != nil:
			// Lent to another receiver (an earlier attempt whose claim is
			// not released yet): taken back by that one's failure first.
			return n, fmt.Errorf("IPReservation %s is still lent to another claim; waiting for it", res.Name)
		}
		if err := reservation.Lend(ctx, reservation.KubeStore{Client: r.Reservations}, res, to); err != nil {
			return n, err
		}
		n++
		log.FromContext(ctx).Info("lent the migration source's address to the receiver's claim", "reservation", res.Name, "ip", res.Spec.IP,
			"source", src.Namespace+"/"+src.Name, "receiver", dst.Namespace+"/"+dst.Name)
	}
	return n, nil
}

// sourceClaimOf returns the source VM's claim of the receiver claim's
// logical network and CNI network (one pool), or nil.
func sourceClaimOf(sources []ipamclaimsv1alpha1.IPAMClaim, c *ipamclaimsv1alpha1.IPAMClaim) *ipamclaimsv1alpha1.IPAMClaim {
	logical := c.Annotations[claimstatus.LogicalNetworkAnnotation]
	for i := range sources {
		s := &sources[i]
		if s.DeletionTimestamp == nil && s.Annotations[claimstatus.LogicalNetworkAnnotation] == logical && s.Spec.Network == c.Spec.Network && logical != "" {
			return s
		}
	}
	return nil
}

// pass makes each receiver claim the owner of what was lent to it, once
// the migration succeeded, and has the source's claims released (their
// addresses gone with the VM). A source claim is marked first: should
// it be released before its reservations passed, the garbage collector
// passes them (a reservation lent to a live claim is never freed).
func (r *Reconciler) pass(ctx context.Context, req reconcile.Request, mine []receiverClaim) error {
	var errs []error
	for _, rc := range mine {
		c := rc.claim
		for i := range rc.lent {
			res := &rc.lent[i]
			o := res.Spec.Owner
			if err := r.markHandedOver(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, o.UID,
				"its addresses passed to the VM that received this one with a decentralized live migration"); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := reservation.PassToBorrower(ctx, reservation.KubeStore{Client: r.Reservations}, res); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			continue
		}
		if c.Annotations[claimstatus.ReceiverAnnotation] == claimstatus.ReceiverWaiting {
			if err := r.setReceiver(ctx, c, receivedValue); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if len(rc.lent) > 0 {
			r.Recorder.Eventf(ownerVM(c), corev1.EventTypeNormal, string(ReasonHandedOver),
				"IPAMClaim %s now holds %s: the decentralized live migration succeeded", c.Name, claimsAddresses(c))
			log.FromContext(ctx).Info("the migration succeeded: the receiver's claim holds the source's addresses", "claim", req.Namespace+"/"+c.Name)
		}
	}
	return errors.Join(errs...)
}

// takeBack returns what was lent to the receiver's claims to their
// sources, once the migration failed or was cancelled, and has the
// receiver's claims that recorded it released (made anew, waiting).
func (r *Reconciler) takeBack(ctx context.Context, mine []receiverClaim) error {
	var errs []error
	for _, rc := range mine {
		c := rc.claim
		failed := false
		for i := range rc.lent {
			if err := reservation.Unlend(ctx, reservation.KubeStore{Client: r.Reservations}, &rc.lent[i]); err != nil {
				errs = append(errs, err)
				failed = true
			}
		}
		if failed || !claimstatus.Filled(c) || c.Annotations[claimstatus.ReceiverAnnotation] != claimstatus.ReceiverWaiting {
			continue
		}
		if err := r.markHandedOver(ctx, client.ObjectKeyFromObject(c), c.UID,
			"the decentralized live migration that lent it the source's addresses failed or was cancelled; the source keeps them"); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Recorder.Eventf(ownerVM(c), corev1.EventTypeWarning, string(ReasonTakenBack),
			"IPAMClaim %s: the decentralized live migration failed or was cancelled; the source VM keeps %s, and the claim is made anew", c.Name, claimsAddresses(c))
	}
	return errors.Join(errs...)
}

// ownAddresses lets a waiting receiver claim get addresses of its own.
func (r *Reconciler) ownAddresses(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, why string) error {
	if err := r.setReceiver(ctx, c, ownPrefix+why); err != nil {
		return err
	}
	r.Recorder.Eventf(ownerVM(c), corev1.EventTypeWarning, string(ReasonNotHandedOver), "IPAMClaim %s gets addresses of its own: %s", c.Name, why)
	return nil
}

func (r *Reconciler) setReceiver(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, value string) error {
	return r.annotate(ctx, c, claimstatus.ReceiverAnnotation, value)
}

// markHandedOver marks the claim (that object: uid) to be released.
func (r *Reconciler) markHandedOver(ctx context.Context, key types.NamespacedName, uid types.UID, why string) error {
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := r.Client.Get(ctx, key, &c); err != nil {
		return client.IgnoreNotFound(err)
	}
	if c.UID != uid || c.Annotations[claimstatus.HandedOverAnnotation] != "" {
		return nil
	}
	return r.annotate(ctx, &c, claimstatus.HandedOverAnnotation, why)
}

// annotate sets one annotation of a claim with a merge patch at the
// version read.
func (r *Reconciler) annotate(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, key, value string) error {
	if c.Annotations[key] == value {
		return nil
	}
	base := c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[key] = value
	if err := r.Client.Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("annotating IPAMClaim %s/%s %s: %w", c.Namespace, c.Name, key, err)
	}
	return nil
}

func ownerVM(c *ipamclaimsv1alpha1.IPAMClaim) client.Object {
	owner, _ := claimowner.Of(c)
	vm := &kubevirtv1.VirtualMachine{}
	vm.Namespace, vm.Name, vm.UID = c.Namespace, owner.Name, owner.UID
	return vm
}

func claimsAddresses(c *ipamclaimsv1alpha1.IPAMClaim) string {
	if len(c.Status.IPs) == 0 {
		return "addresses"
	}
	return fmt.Sprintf("addresses %v", c.Status.IPs)
}

// SetupWithManager registers the controller with the KubeVirt manager;
// the reservations come from the main manager's cache.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("migration-handover").
		WithOptions(retry.Options()).
		// The receiver's VMI: its migration state.
		For(&kubevirtv1.VirtualMachineInstance{}).
		// The receiver's claims: made, filled.
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if owner, ok := claimowner.Of(o); ok && owner.Kind == claimowner.KindVM {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: owner.Name}}}
			}
			return nil
		})).
		// The receiving migration (receive.migrationID).
		Watches(&kubevirtv1.VirtualMachineInstanceMigration{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			m, ok := o.(*kubevirtv1.VirtualMachineInstanceMigration)
			if !ok || m.Spec.Receive == nil {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}}}
		})).
		Watches(&kubevirtv1.VirtualMachine{}, byName).
		WatchesRawSource(source.Kind(r.ReservationCache, &ipkeeperv1alpha1.IPReservation{},
			handler.TypedEnqueueRequestsFromMapFunc(r.receiverOfReservation))).
		Complete(r)
}

// receiverOfReservation maps a lent reservation to its borrower's VM.
func (r *Reconciler) receiverOfReservation(ctx context.Context, res *ipkeeperv1alpha1.IPReservation) []reconcile.Request {
	l := res.Spec.LentTo
	if l == nil {
		return nil
	}
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, &c); err != nil {
		return nil
	}
	if owner, ok := claimowner.Of(&c); ok {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: owner.Name}}}
	}
	return nil
}
