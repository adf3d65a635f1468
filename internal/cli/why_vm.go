// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// vmNetwork is one secondary network of a VM as ipkeeper sees it.
type vmNetwork struct {
	net        kubevirt.SecondaryNetwork
	nad        types.NamespacedName
	persistent bool
	claim      string
}

func whyVM(ctx context.Context, s *session, key types.NamespacedName) (*Report, error) {
	var vm kubevirtv1.VirtualMachine
	if err := s.client.Get(ctx, key, &vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &notFoundError{fmt.Sprintf("VirtualMachine %s not found", key)}
		}
		if meta.IsNoMatchError(err) {
			return nil, &notFoundError{fmt.Sprintf("VirtualMachine %s: KubeVirt is not installed (the API server does not serve VirtualMachines)", key)}
		}
		return nil, fmt.Errorf("reading VirtualMachine %s: %w", key, err)
	}
	now := s.now()
	rep := &Report{Object: fmt.Sprintf("VirtualMachine %s (uid %s)", key, vm.UID)}
	rep.add("VM", fmt.Sprintf("status %s, age %s", orNone(string(vm.Status.PrintableStatus)), age(now, vm.CreationTimestamp.Time)))
	if v, ok := vm.Annotations[claimstatus.RetentionAnnotation]; ok {
		// What the claims record of it (capped by the controller) shows
		// with each claim below.
		if _, err := claimstatus.ParseRetention(v); err != nil {
			rep.next("fix the VM's %v; until then its addresses are not kept after its claims are released", err)
		} else {
			rep.add("Retention", fmt.Sprintf("%s %s on the VM (ipkeeper-controller caps it at its --max-address-retention)", claimstatus.RetentionAnnotation, v))
		}
	}

	gateOn, err := kubevirt.CRGate{Reader: s.client}.Enabled(ctx)
	gateLine := fmt.Sprintf("%s listed in a KubeVirt CR: %t", kubevirt.PersistentIPsGate, gateOn)
	switch {
	case err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)):
		gateLine = "no KubeVirt CR is served: " + err.Error()
	case err != nil:
		return nil, err
	}
	rep.add("Feature gate", gateLine+" (ipkeeper-controller ignores it when run with --require-kubevirt-feature-gate=false)")
	// Who makes the claims (claimmaker): a user who may not list webhook
	// configurations is told nothing of it.
	external, _ := claimmaker.Detect(ctx, s.client)
	if external != "" {
		rep.add("Claims maker", fmt.Sprintf("another IPAMClaims controller: webhook %s of MutatingWebhookConfiguration %s (ipam-extensions) makes claims when the VM starts and sets launchers' references; ipkeeper-controller (--claims-controller=auto) fills their addresses", claimmaker.ExtensionsWebhook, external))
	}
	if !gateOn && external == "" {
		rep.next("enable the %s feature gate in the KubeVirt CR (spec.configuration.developerConfiguration.featureGates; docs/kubevirt.md), or run ipkeeper-controller with --require-kubevirt-feature-gate=false", kubevirt.PersistentIPsGate)
	}

	var networks []kubevirt.SecondaryNetwork
	if vm.Spec.Template != nil {
		networks = kubevirt.SecondaryNetworks(&vm.Spec.Template.Spec)
	}
	all, err := listReservations(ctx, s.client, key.Namespace)
	if err != nil {
		return nil, err
	}
	var netLines, claimFacts []string
	var held []ipkeeperv1alpha1.IPReservation
	var vmNets []vmNetwork
	anyPersistent := false
	for _, n := range networks {
		line := fmt.Sprintf("%s (multus.networkName %s)", n.Name, n.NetworkName)
		if n.MAC != "" {
			line = fmt.Sprintf("%s (multus.networkName %s, its own macAddress %s)", n.Name, n.NetworkName, n.MAC)
		}
		if n.Absent {
			netLines = append(netLines, line+": being unplugged")
			continue
		}
		nadKey, err := multus.NADRef(n.NetworkName, key.Namespace)
		if err != nil {
			netLines = append(netLines, line+": "+err.Error())
			rep.next("fix network %q of the VM: %v", n.Name, err)
			continue
		}
		nw, problem, err := readNAD(ctx, s.client, nadKey)
		if err != nil {
			return nil, err
		}
		if problem != "" {
			netLines = append(netLines, line+": "+problem)
			rep.next("%s", problem)
			continue
		}
		claimName, err := claims.ClaimOf(ctx, s.client, key.Namespace, vm.Name, vm.UID, n.Name, nw.Name)
		if err != nil {
			return nil, err
		}
		vn := vmNetwork{net: n, nad: nadKey, persistent: nw.AllowPersistentIPs, claim: claimName}
		vmNets = append(vmNets, vn)
		line += fmt.Sprintf(": NAD %s, CNI network %q, allowPersistentIPs %t", nadKey, nw.Name, nw.AllowPersistentIPs)
		if p := nw.FlagProblem(); p != "" {
			line += " (" + p + ")"
			rep.next("NetworkAttachmentDefinition %s: %s", nadKey, p)
		}
		netLines = append(netLines, line+nw.ignoredLine())
		if next := nw.unknownNext(nadKey); next != "" {
			rep.next("%s", next)
		}
		if !nw.AllowPersistentIPs {
			continue
		}
		anyPersistent = true
		claim, err := getClaim(ctx, s.client, types.NamespacedName{Namespace: key.Namespace, Name: vn.claim})
		if err != nil {
			return nil, err
		}
		if claim == nil {
			claimFacts = append(claimFacts, fmt.Sprintf("IPAMClaim %s (network %s): not found", vn.claim, n.Name))
			switch {
			case external != "":
				rep.next("the other IPAMClaims controller makes IPAMClaim %s/%s when the VM starts (a stopped VM has none); if the VM runs, check that controller", key.Namespace, vn.claim)
			case gateOn:
				rep.next("ipkeeper-controller has not created IPAMClaim %s/%s: check that it runs and has a leader (docs/troubleshooting.md, The controller is down) and the VM's events", key.Namespace, vn.claim)
			}
			continue
		}
		held, claimFacts = foundClaim(rep, claim, all, held, claimFacts)
	}
	if len(networks) == 0 {
		netLines = append(netLines, "no secondary (Multus) networks")
	}
	rep.add("Networks", netLines...)
	if len(claimFacts) > 0 {
		rep.add("Claims", claimFacts...)
	}
	rep.add("Reservations", reservationLines(held, now)...)

	launchers, err := launcherPods(ctx, s.client, key.Namespace, vm.Name)
	if err != nil {
		return nil, err
	}
	var podLines []string
	for i := range launchers {
		pod := &launchers[i]
		line := fmt.Sprintf("%s: phase %s, node %s", pod.Name, pod.Status.Phase, orNone(pod.Spec.NodeName))
		elems, perr := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
		if perr != nil {
			podLines = append(podLines, line+": "+perr.Error())
			continue
		}
		var refs []string
		for _, vn := range vmNets {
			if !vn.persistent {
				continue
			}
			ref, mac := refFor(elems, vn.nad)
			switch ref {
			case vn.claim:
				refs = append(refs, fmt.Sprintf("network %s: webhook reference %q present, mac %s", vn.net.Name, ref, orNone(mac)))
			case "":
				refs = append(refs, fmt.Sprintf("network %s: webhook reference missing", vn.net.Name))
				rep.next("launcher pod %s has no %s for network %s: it was created while the webhook was down or not registered, so its addresses change on restart; restart the VM once the webhook runs", pod.Name, multus.ClaimRefKey, vn.net.Name)
			default:
				refs = append(refs, fmt.Sprintf("network %s: references %q, not %q", vn.net.Name, ref, vn.claim))
			}
		}
		if len(refs) > 0 {
			line += "; " + strings.Join(refs, "; ")
		}
		podLines = append(podLines, line)
	}
	rep.add("Launcher pods", podLines...)
	guest, err := guestLines(ctx, s.client, key)
	if err != nil {
		return nil, err
	}
	if len(guest) > 0 {
		rep.add("Guest (as its guest agent reports)", guest...)
	}

	events, err := eventsOf(ctx, s.client, key.Namespace, "VirtualMachine", key.Name, vm.UID)
	if err != nil {
		return nil, err
	}
	rep.add("Events", eventLines(events, 5, now)...)

	if len(rep.Next) > 0 {
		return rep, nil
	}
	switch {
	case len(networks) == 0:
		rep.next("nothing to do: ipkeeper keeps addresses only on secondary (Multus) networks")
	case !anyPersistent:
		var nads []string
		for _, vn := range vmNets {
			nads = append(nads, vn.nad.String())
		}
		rep.next("no network of the VM keeps its addresses across restarts; to keep them, set \"allowPersistentIPs\": true at the top level of the spec.config of NetworkAttachmentDefinition %s", strings.Join(nads, ", "))
	default:
		rep.next("nothing to do: the VM's claims hold their addresses")
	}
	return rep, nil
}

// launcherPods lists the virt-launcher pods of a VM's VMI (same name).
func launcherPods(ctx context.Context, c client.Reader, namespace, vmi string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue}); err != nil {
		return nil, fmt.Errorf("listing the virt-launcher pods of %s/%s: %w", namespace, vmi, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if name, ok := kubevirt.IsLauncherPod(&p); ok && name == vmi {
			out = append(out, p)
		}
	}
	return out, nil
}

// refFor is the claim reference and mac of the element attaching nad, ""
// if none.
func refFor(elems []multus.Element, nad types.NamespacedName) (ref, mac string) {
	for _, e := range elems {
		if e.NAD() == nad && e.ClaimRef != "" {
			return e.ClaimRef, e.MAC
		}
	}
	return "", ""
}

// guestLines are the VMI's interfaces as the guest agent reports them:
// name, MAC and addresses, to set beside the claims' (none without a
// running VMI or a guest agent).
func guestLines(ctx context.Context, c client.Reader, key types.NamespacedName) ([]string, error) {
	var vmi kubevirtv1.VirtualMachineInstance
	if err := c.Get(ctx, key, &vmi); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", key, err)
	}
	var lines []string
	for _, iface := range vmi.Status.Interfaces {
		if !strings.Contains(iface.InfoSource, "guest-agent") {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s, MAC %s, addresses %s", orNone(iface.Name), orNone(iface.InterfaceName), orNone(iface.MAC), orNone(strings.Join(iface.IPs, ", "))))
	}
	return lines, nil
}
