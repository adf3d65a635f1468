// SPDX-License-Identifier: Apache-2.0

package guestnet

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// infoSourceGuestAgent marks, in a VMI's status.interfaces[].infoSource,
// what the guest agent reported (KubeVirt's own constant is not in its
// API module).
const infoSourceGuestAgent = "guest-agent"

// ReasonDrift is the Warning Event on the VMI when its guest's addresses
// differ from its claim's.
const ReasonDrift EventReason = claimstatus.ReasonGuestAddressesDiffer

var driftGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_claims_guest_addresses_differ",
	Help: "IPAMClaims whose running guest, as its guest agent reports, uses an address ipkeeper did not give it or lacks one it did (condition GuestAddresses=False).",
})

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{driftGauge}
}

// DriftReconciler compares what running guests report with their claims.
type DriftReconciler struct {
	Client client.Client
	// Pods reads launcher pods' metadata (the main manager's cache).
	Pods     client.Reader
	Recorder record.EventRecorder

	mu      sync.Mutex
	differs map[types.NamespacedName]bool // claims now False, for the gauge
}

// Reconcile judges one VMI's guest-reported interfaces.
func (r *DriftReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var vmi kubevirtv1.VirtualMachineInstance
	if err := r.Client.Get(ctx, req.NamespacedName, &vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.forget(ctx, req.NamespacedName, nil)
		}
		return reconcile.Result{}, err
	}
	if vmi.Status.Phase != kubevirtv1.Running || vmi.DeletionTimestamp != nil {
		// No guest runs: no report, so no condition.
		return reconcile.Result{}, r.forget(ctx, req.NamespacedName, nil)
	}
	owner, uid := vmi.Name, vmi.UID
	if ref := metav1.GetControllerOf(&vmi); ref != nil && ref.Kind == claimowner.KindVM {
		owner, uid = ref.Name, ref.UID
	}
	networks := map[string]kubevirtv1.Network{}
	for _, n := range vmi.Spec.Networks {
		networks[n.Name] = n
	}
	judged := map[string]bool{}
	for _, iface := range vmi.Status.Interfaces {
		n, ok := networks[iface.Name]
		if !ok || n.Multus == nil || n.Multus.Default || !strings.Contains(iface.InfoSource, infoSourceGuestAgent) {
			continue
		}
		claim, err := r.usedClaim(ctx, &vmi, iface)
		if err != nil {
			return reconcile.Result{}, err
		}
		if claim == nil || !claimstatus.Filled(claim) || !ours(claim, uid) {
			continue
		}
		judged[claim.Name] = true
		if err := r.judge(ctx, &vmi, claim, iface); err != nil {
			return reconcile.Result{}, err
		}
	}
	// The owner's other claims are not what its guest runs with now (a
	// network swapped or unplugged): no report, no condition.
	return reconcile.Result{}, r.forget(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: owner}, judged)
}

// ours: the claim belongs to the VMI's owner (uid), so the guest's report
// may judge it.
func ours(claim *ipamclaimsv1alpha1.IPAMClaim, uid types.UID) bool {
	owner, ok := claimowner.Of(claim)
	return ok && owner.UID == uid
}

// usedClaim is the claim the launcher running the guest (on the VMI's
// node) references for the interface: after a live NAD swap whose
// migration has not happened, the guest still runs on the old network,
// with the old network's claim, while the VMI's spec names the new one.
// nil when no such launcher or reference is found.
func (r *DriftReconciler) usedClaim(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, iface kubevirtv1.VirtualMachineInstanceNetworkInterface) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	if r.Pods == nil || vmi.Status.NodeName == "" {
		return nil, nil
	}
	podIface := iface.PodInterfaceName
	if podIface == "" {
		podIface = kubevirt.PodInterfaceName(iface.Name)
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.Pods.List(ctx, pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return nil, fmt.Errorf("listing the launcher pods of VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || vmi.Status.ActivePods[p.UID] != vmi.Status.NodeName {
			continue
		}
		elems, err := multus.ParseElements(p.Annotations[multus.Annotation], p.Namespace)
		if err != nil {
			continue
		}
		for _, e := range elems {
			if e.Interface != podIface || e.ClaimRef == "" {
				continue
			}
			var claim ipamclaimsv1alpha1.IPAMClaim
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: e.ClaimRef}, &claim); err != nil {
				return nil, client.IgnoreNotFound(err)
			}
			return &claim, nil
		}
	}
	return nil, nil
}

// judge sets the claim's GuestAddresses condition from one reported
// interface, and tells a new difference on the VM.
func (r *DriftReconciler) judge(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, claim *ipamclaimsv1alpha1.IPAMClaim, iface kubevirtv1.VirtualMachineInstanceNetworkInterface) error {
	cond := Compare(claimstatus.Addresses(claim), iface.IPs, iface.InterfaceName)
	cond.ObservedGeneration = claim.Generation
	key := client.ObjectKeyFromObject(claim)
	r.count(key, cond.Status == metav1.ConditionFalse)
	was := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionGuestAddresses)
	updated := claim.DeepCopy()
	if !meta.SetStatusCondition(&updated.Status.Conditions, cond) {
		return nil
	}
	if err := claimstatus.Write(ctx, r.Client, updated); err != nil {
		return client.IgnoreNotFound(err)
	}
	if cond.Status == metav1.ConditionFalse && (was == nil || was.Status != metav1.ConditionFalse || was.Message != cond.Message) {
		r.Recorder.Eventf(vmi, corev1.EventTypeWarning, string(ReasonDrift), "IPAMClaim %s: %s", claim.Name, cond.Message)
	}
	return nil
}

// forget removes the condition from the claims of the VM (or VMI) named
// key but those in keep: its guest no longer runs, or no longer runs with
// them.
func (r *DriftReconciler) forget(ctx context.Context, key types.NamespacedName, keep map[string]bool) error {
	// By the owner-name index: every claim event of a namespace comes
	// here, and listing the whole namespace's claims each time made a VM
	// boot storm quadratic (1,000 claims: 8x the controller's CPU per
	// claim filled).
	list, err := claims.ClaimsOf(ctx, r.Client, key.Namespace, key.Name)
	if err != nil {
		return err
	}
	for i := range list {
		claim := &list[i]
		if owner, ok := claimowner.Of(claim); !ok || owner.Name != key.Name || keep[claim.Name] {
			continue
		}
		r.count(client.ObjectKeyFromObject(claim), false)
		updated := claim.DeepCopy()
		if !meta.RemoveStatusCondition(&updated.Status.Conditions, claimstatus.ConditionGuestAddresses) {
			continue
		}
		if err := claimstatus.Write(ctx, r.Client, updated); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (r *DriftReconciler) count(key types.NamespacedName, differs bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.differs == nil {
		r.differs = map[types.NamespacedName]bool{}
	}
	if differs {
		r.differs[key] = true
	} else {
		delete(r.differs, key)
	}
	driftGauge.Set(float64(len(r.differs)))
}

// Compare is the GuestAddresses condition of a claim holding held whose
// guest reports reported on its interface guestIface: link-local IPv6
// addresses are the guest's own and not judged.
func Compare(held []netip.Addr, reported []string, guestIface string) metav1.Condition {
	var uses []netip.Addr
	for _, s := range reported {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			if p, perr := netip.ParsePrefix(s); perr == nil {
				ip = p.Addr()
			} else {
				continue
			}
		}
		if ip.IsLinkLocalUnicast() {
			continue
		}
		uses = append(uses, ip.Unmap())
	}
	var other, lacks []string
	for _, ip := range uses {
		if !slices.Contains(held, ip) {
			other = append(other, ip.String())
		}
	}
	for _, ip := range held {
		if !slices.Contains(uses, ip) {
			lacks = append(lacks, ip.String())
		}
	}
	where := "the guest"
	if guestIface != "" {
		where = fmt.Sprintf("the guest's %s", guestIface)
	}
	if len(other) == 0 && len(lacks) == 0 {
		return metav1.Condition{Type: claimstatus.ConditionGuestAddresses, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonGuestUsesItsAddresses,
			Message: fmt.Sprintf("%s uses the claim's addresses, as its guest agent reports", where)}
	}
	var parts []string
	if len(other) > 0 {
		parts = append(parts, fmt.Sprintf("uses %s, which ipkeeper did not give it", strings.Join(other, ", ")))
	}
	if len(lacks) > 0 {
		parts = append(parts, fmt.Sprintf("lacks %s, which ipkeeper gave it", strings.Join(lacks, ", ")))
	}
	return metav1.Condition{Type: claimstatus.ConditionGuestAddresses, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonGuestAddressesDiffer,
		Message: fmt.Sprintf("%s %s (its guest agent reports)", where, strings.Join(parts, " and "))}
}

// SetupWithManager registers the controller: a VMI's status changed, or a
// claim's addresses.
func (r *DriftReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("guest-addresses").
		WithOptions(retry.Options()).
		For(&kubevirtv1.VirtualMachineInstance{}).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, handler.EnqueueRequestsFromMapFunc(vmiOfClaim)).
		Complete(r)
}

// vmiOfClaim is the VMI of a claim's owner: a VM's VMI has its name.
func vmiOfClaim(_ context.Context, o client.Object) []reconcile.Request {
	claim, ok := o.(*ipamclaimsv1alpha1.IPAMClaim)
	if !ok {
		return nil
	}
	owner, ok := claimowner.Of(claim)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: owner.Name}}}
}
