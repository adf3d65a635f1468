// SPDX-License-Identifier: Apache-2.0

package guestnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

const (
	// Annotation on a VM asks for its guest network configuration Secret
	// ("true") or refuses it ("false"); on a NAD, "true" asks for it for
	// every VM with a network of that NAD, unless the VM refuses it.
	Annotation = "ipkeeper.io/guest-network-config"
	// OfLabel on the Secret names its VM; with the managed-by label it is
	// what the policy lets ipkeeper-controller write.
	OfLabel = "ipkeeper.io/guest-network-of"
	// ManagedByLabel and ManagedBy mark the Secrets ipkeeper-controller writes.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "ipkeeper-controller"
	// DataKey is the key KubeVirt reads a NoCloud networkdata from.
	DataKey = "networkdata"
	// fieldOwner is the server-side apply field manager.
	fieldOwner = "ipkeeper-controller"
)

// EventReason is the reason of an Event on a VM.
type EventReason string

// The Event reasons, listed in docs/troubleshooting.md.
const (
	// ReasonNotWritten: the VM's configuration cannot be made (a network's
	// definition or claim is unusable); the message says which.
	ReasonNotWritten EventReason = "GuestNetworkConfigNotWritten"
	// ReasonUnmatched: interfaces ipkeeper does not serve that have no
	// macAddress, which the configuration cannot name, so the guest leaves
	// them unconfigured.
	ReasonUnmatched EventReason = "GuestNetworkInterfacesUnmatched"
)

// SecretName is the name of the Secret of vm's guest network configuration.
func SecretName(vm string) string { return vm + "-ipkeeper-network" }

// Wanted reports whether the VM asks for its guest network configuration
// itself.
func Wanted(vm *kubevirtv1.VirtualMachine) bool { return vm.Annotations[Annotation] == "true" }

// ReadBy reports whether the guest of spec, VM vm's, reads vm's guest
// network configuration Secret: a cloud-init volume names it as its network
// data. That guest finds its NICs by their claims' MACs (Render).
func ReadBy(spec *kubevirtv1.VirtualMachineInstanceSpec, vm string) bool {
	for _, v := range spec.Volumes {
		var ref *corev1.LocalObjectReference
		switch {
		case v.CloudInitNoCloud != nil:
			ref = v.CloudInitNoCloud.NetworkDataSecretRef
		case v.CloudInitConfigDrive != nil:
			ref = v.CloudInitConfigDrive.NetworkDataSecretRef
		}
		if ref != nil && ref.Name == SecretName(vm) {
			return true
		}
	}
	return false
}

// Refused reports whether the VM refuses it, whatever its networks ask.
func Refused(vm *kubevirtv1.VirtualMachine) bool { return vm.Annotations[Annotation] == "false" }

// wantedByNetwork reports whether a NAD of the VM's namespace that one of
// its networks uses asks for the guest network configuration of its VMs
// (Annotation on the NAD). A NAD of another namespace decides nothing for
// this one's VMs. A NAD that cannot be read asks for nothing.
func (r *Reconciler) wantedByNetwork(ctx context.Context, vm *kubevirtv1.VirtualMachine) bool {
	for _, n := range kubevirt.SecondaryNetworks(&vm.Spec.Template.Spec) {
		key, err := multus.NADRef(n.NetworkName, vm.Namespace)
		if err != nil || n.Absent || key.Namespace != vm.Namespace {
			continue
		}
		var nad nadv1.NetworkAttachmentDefinition
		if err := r.Client.Get(ctx, key, &nad); err == nil && nad.Annotations[Annotation] == "true" {
			return true
		}
	}
	return false
}

// Reconciler keeps the guest network configuration Secrets.
type Reconciler struct {
	// Client reads VMs, claims and NADs (cached) and applies Secrets.
	Client client.Client
	// Pools reads IPPools (the main manager's cache): their ranges'
	// gateways.
	Pools    client.Reader
	Recorder record.EventRecorder
}

// configError is a problem of the VM's networks that a change fixes: told
// on the VM, not retried.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

// Reconcile writes one VM's Secret when all its claims are filled.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var vm kubevirtv1.VirtualMachine
	if err := r.Client.Get(ctx, req.NamespacedName, &vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if v, ok := vm.Annotations[Annotation]; ok && v != "true" && v != "false" {
		r.Recorder.Eventf(&vm, corev1.EventTypeWarning, string(ReasonNotWritten), "annotation %s: %q is neither \"true\" nor \"false\"; no Secret is written", Annotation, v)
		return reconcile.Result{}, nil
	}
	if Refused(&vm) || vm.DeletionTimestamp != nil || vm.Spec.Template == nil || (!Wanted(&vm) && !r.wantedByNetwork(ctx, &vm)) {
		return reconcile.Result{}, nil
	}
	ifaces, waiting, err := r.interfaces(ctx, &vm)
	others, unmatched := otherInterfaces(&vm.Spec.Template.Spec, ifaces)
	ifaces = append(ifaces, others...)
	var ce *configError
	switch {
	case errors.As(err, &ce):
		r.Recorder.Eventf(&vm, corev1.EventTypeWarning, string(ReasonNotWritten), "Secret %s: %s", SecretName(vm.Name), ce.msg)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, err
	case waiting != "":
		// The claim's fill, or its creation, brings the VM back.
		log.FromContext(ctx).V(1).Info("guest network configuration waits", "vm", req.String(), "for", waiting)
		return reconcile.Result{}, nil
	}
	data, err := Render(ifaces)
	if err != nil {
		r.Recorder.Eventf(&vm, corev1.EventTypeWarning, string(ReasonNotWritten), "Secret %s: %v", SecretName(vm.Name), err)
		return reconcile.Result{}, nil
	}
	if len(unmatched) > 0 {
		r.Recorder.Eventf(&vm, corev1.EventTypeWarning, string(ReasonUnmatched),
			"Secret %s: interfaces %s have no macAddress, so the guest network configuration cannot name them and the guest leaves them unconfigured; give them a macAddress to have them configured by DHCP",
			SecretName(vm.Name), strings.Join(unmatched, ", "))
	}
	return reconcile.Result{}, r.apply(ctx, &vm, data)
}

// otherInterfaces are the VM's interfaces ipkeeper does not configure
// (served lists those it does), left to DHCP: those with a macAddress, by
// which the guest finds them; unmatched names those without one.
func otherInterfaces(spec *kubevirtv1.VirtualMachineInstanceSpec, served []Interface) (others []Interface, unmatched []string) {
	mine := map[string]bool{}
	for _, ifc := range served {
		mine[ifc.ID] = true
	}
	for _, i := range spec.Domain.Devices.Interfaces {
		if mine[i.Name] || i.State == kubevirtv1.InterfaceStateAbsent {
			continue
		}
		mac, err := net.ParseMAC(i.MacAddress)
		if err != nil || len(mac) != 6 {
			unmatched = append(unmatched, strconv.Quote(i.Name))
			continue
		}
		others = append(others, Interface{ID: i.Name, MAC: mac, DHCP: true})
	}
	return others, unmatched
}

// apply writes the Secret by server-side apply: no read needed, and a
// configuration that did not change writes nothing.
func (r *Reconciler) apply(ctx context.Context, vm *kubevirtv1.VirtualMachine, data []byte) error {
	secret := corev1ac.Secret(SecretName(vm.Name), vm.Namespace).
		WithLabels(map[string]string{ManagedByLabel: ManagedBy, OfLabel: vm.Name}).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(kubevirtv1.SchemeGroupVersion.String()).WithKind("VirtualMachine").
			WithName(vm.Name).WithUID(vm.UID).WithBlockOwnerDeletion(false)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{DataKey: data})
	if err := r.Client.Apply(ctx, secret, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying Secret %s/%s: %w", vm.Namespace, SecretName(vm.Name), err)
	}
	return nil
}

// interfaces lists what the guest configures: one Interface per network
// of the VM that ipkeeper serves with persistent addresses. waiting names
// a claim not made or not filled yet.
func (r *Reconciler) interfaces(ctx context.Context, vm *kubevirtv1.VirtualMachine) (_ []Interface, waiting string, _ error) {
	var out []Interface
	for _, n := range kubevirt.SecondaryNetworks(&vm.Spec.Template.Spec) {
		if n.Absent {
			continue
		}
		key, err := multus.NADRef(n.NetworkName, vm.Namespace)
		if err != nil {
			return nil, "", &configError{fmt.Sprintf("network %q: %v", n.Name, err)}
		}
		var nad nadv1.NetworkAttachmentDefinition
		if err := r.Client.Get(ctx, key, &nad); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Sprintf("NetworkAttachmentDefinition %s", key), nil
			}
			return nil, "", fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
		}
		nw, err := multus.ParseNAD(&nad)
		if err != nil {
			return nil, "", &configError{fmt.Sprintf("network %q: %v", n.Name, err)}
		}
		cfg, found, err := inlinepool.Network(&nad)
		switch {
		case err != nil:
			return nil, "", &configError{fmt.Sprintf("network %q: %v", n.Name, err)}
		case !found || !nw.AllowPersistentIPs:
			continue // not ipkeeper's, or no claim: the guest's own business
		}
		name, err := claims.ClaimOf(ctx, r.Client, vm.Namespace, vm.Name, vm.UID, n.Name, nw.Name)
		if err != nil {
			return nil, "", err
		}
		var claim ipamclaimsv1alpha1.IPAMClaim
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, &claim); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "IPAMClaim " + name, nil
			}
			return nil, "", fmt.Errorf("reading IPAMClaim %s/%s: %w", vm.Namespace, name, err)
		}
		if !claimstatus.Filled(&claim) {
			return nil, "the addresses of IPAMClaim " + name, nil
		}
		ifc, err := r.iface(ctx, n, &claim, cfg)
		if err != nil {
			return nil, "", err
		}
		out = append(out, ifc)
	}
	return out, "", nil
}

// iface is one network's Interface.
func (r *Reconciler) iface(ctx context.Context, n kubevirt.SecondaryNetwork, claim *ipamclaimsv1alpha1.IPAMClaim, cfg *ipamconfig.Config) (Interface, error) {
	entries, err := claimstatus.Entries(claim)
	if err != nil {
		return Interface{}, &configError{fmt.Sprintf("network %q: IPAMClaim %s: %v", n.Name, claim.Name, err)}
	}
	ifc := Interface{ID: n.Name, Nameservers: cfg.DNS.Nameservers, Search: cfg.DNS.Search}
	for _, e := range entries {
		ifc.Addresses = append(ifc.Addresses, e.Prefix)
	}
	if n.MAC != "" {
		if ifc.MAC, err = net.ParseMAC(n.MAC); err != nil {
			return Interface{}, &configError{fmt.Sprintf("network %q: interface macAddress %q: %v", n.Name, n.MAC, err)}
		}
	} else if mac, _, ok := macaddr.OfClaim(claim); ok {
		ifc.MAC = mac
	}
	gateways, err := r.gateways(ctx, cfg.PoolName())
	if err != nil {
		return Interface{}, err
	}
	for _, rt := range cfg.Routes {
		to, ok := prefixOf(rt.Dst)
		if !ok {
			continue // parsed by ipamconfig: never
		}
		route := Route{To: to}
		if gw, ok := netip.AddrFromSlice(rt.GW); ok && len(rt.GW) > 0 {
			route.Via = gw.Unmap()
		} else {
			route.Via = gatewayFor(gateways, ifc.Addresses, to.Addr().Is4())
		}
		ifc.Routes = append(ifc.Routes, route)
	}
	return ifc, nil
}

// gateways are the gateways of the pool's ranges, by range.
func (r *Reconciler) gateways(ctx context.Context, pool string) (map[netip.Prefix]netip.Addr, error) {
	var p ipkeeperv1alpha1.IPPool
	if err := r.Pools.Get(ctx, types.NamespacedName{Name: pool}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil // routes without a gw are then on-link
		}
		return nil, fmt.Errorf("reading IPPool %s: %w", pool, err)
	}
	ranges, err := ipamconfig.PoolRanges(&p.Spec)
	if err != nil {
		return nil, &configError{fmt.Sprintf("IPPool %s: %v", pool, err)}
	}
	out := map[netip.Prefix]netip.Addr{}
	for _, rg := range ranges {
		if gw := rg.Gateway(); gw.IsValid() {
			out[rg.Subnet()] = gw
		}
	}
	return out, nil
}

// gatewayFor is the gateway of the range holding the interface's address
// of one family: what a route without a gw goes through, as the CNI result
// says.
func gatewayFor(gateways map[netip.Prefix]netip.Addr, addrs []netip.Prefix, v4 bool) netip.Addr {
	for _, a := range addrs {
		if a.Addr().Is4() != v4 {
			continue
		}
		for subnet, gw := range gateways {
			if subnet.Contains(a.Addr()) {
				return gw
			}
		}
	}
	return netip.Addr{}
}

func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), true
}

// SetupWithManager registers the controller: a VM, a claim of it, or a NAD
// changed.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("guest-network-config").
		WithOptions(retry.Options()).
		For(&kubevirtv1.VirtualMachine{}).
		Watches(&ipamclaimsv1alpha1.IPAMClaim{}, handler.EnqueueRequestsFromMapFunc(vmOfClaim)).
		// A NAD's routes or DNS changed: the namespace's VMs that ask.
		Watches(&nadv1.NetworkAttachmentDefinition{}, handler.EnqueueRequestsFromMapFunc(r.vmsOfNamespace)).
		Complete(r)
}

// vmsOfNamespace are the VMs of o's namespace that do not refuse their
// guest network configuration: the NAD may ask for it, or change what it
// holds.
func (r *Reconciler) vmsOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list kubevirtv1.VirtualMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing the VMs of a changed NetworkAttachmentDefinition's namespace", "namespace", o.GetNamespace())
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if !Refused(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// vmOfClaim is the VM a claim belongs to (its controller reference, or
// ipkeeper's owner labels).
func vmOfClaim(_ context.Context, o client.Object) []reconcile.Request {
	claim, ok := o.(*ipamclaimsv1alpha1.IPAMClaim)
	if !ok {
		return nil
	}
	owner, ok := claimowner.Of(claim)
	if !ok || owner.Kind != claimowner.KindVM {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: owner.Name}}}
}
