// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// VMFacts is what why vm found of a VM. The report's sections are
// rendered from it (renderVM), so -o json and the text say the same.
type VMFacts struct {
	OwnerFacts
	Status string `json:"status,omitempty"`
	// Retention is the VM's valid retention annotation; RetentionProblem
	// why an invalid one is not used.
	Retention        string `json:"retention,omitempty"`
	RetentionProblem string `json:"retentionProblem,omitempty"`
	// FeatureGate is whether a KubeVirt CR lists the PersistentIPs gate;
	// FeatureGateProblem why no CR could be read.
	FeatureGate        bool   `json:"featureGate"`
	FeatureGateProblem string `json:"featureGateProblem,omitempty"`
	// ClaimsMaker is the MutatingWebhookConfiguration of another
	// IPAMClaims controller that makes the VM's claims, "" for none;
	// ClaimsMakerWebhook its webhook that does.
	ClaimsMaker        string               `json:"claimsMaker,omitempty"`
	ClaimsMakerWebhook string               `json:"claimsMakerWebhook,omitempty"`
	Networks           []VMNetworkFact      `json:"networks"`
	LauncherPods       []LauncherPodFact    `json:"launcherPods"`
	Guest              []GuestInterfaceFact `json:"guest,omitempty"`
}

// VMNetworkFact is one secondary network of the VM as ipkeeper sees it.
type VMNetworkFact struct {
	Name        string `json:"name"`
	NetworkName string `json:"networkName"`
	MAC         string `json:"mac,omitempty"`
	// Unplugging: the network is being unplugged (state absent).
	Unplugging bool `json:"unplugging,omitempty"`
	// Problem is why ipkeeper cannot serve the network (a bad reference,
	// a missing or unreadable NAD); the fields below are then unset.
	Problem string `json:"problem,omitempty"`
	NAD     string `json:"nad,omitempty"`
	NADFact
	// Claim is the IPAMClaim the network's addresses are kept in.
	Claim string `json:"claim,omitempty"`
}

// UsedClaim is a claim a VM network or a pod's attachment keeps its
// addresses in.
type UsedClaim struct {
	Name string `json:"name"`
	// Network is the VM's network (none for a pod's claim).
	Network string `json:"network,omitempty"`
	Found   bool   `json:"found"`
	// Claim is what the claim says, when it is found.
	Claim *ClaimFact `json:"claim,omitempty"`
}

// LauncherPodFact is one virt-launcher pod of the VM.
type LauncherPodFact struct {
	Name  string `json:"name"`
	Phase string `json:"phase"`
	Node  string `json:"node,omitempty"`
	// AnnotationProblem is why its networks annotation cannot be read.
	AnnotationProblem string         `json:"annotationProblem,omitempty"`
	References        []ClaimRefFact `json:"references,omitempty"`
}

// ClaimRefFact is the claim reference of a launcher pod for one network
// (Reference "" when the webhook did not set it).
type ClaimRefFact struct {
	Network   string `json:"network"`
	Want      string `json:"want"`
	Reference string `json:"reference"`
	MAC       string `json:"mac,omitempty"`
}

// GuestInterfaceFact is a VMI interface as its guest agent reports it.
type GuestInterfaceFact struct {
	Name          string   `json:"name"`
	InterfaceName string   `json:"interfaceName"`
	MAC           string   `json:"mac"`
	IPs           []string `json:"ips,omitempty"`
}

// vmNetwork is one secondary network of a VM as ipkeeper sees it.
type vmNetwork struct {
	net        kubevirt.SecondaryNetwork
	nad        types.NamespacedName
	persistent bool
	claim      string
}

// vmWhy is one run of why vm: what the steps read and found, and the
// report they add what to do to.
type vmWhy struct {
	s        *session
	key      types.NamespacedName
	vm       kubevirtv1.VirtualMachine
	now      time.Time
	rep      *Report
	facts    *VMFacts
	external string
	networks []kubevirt.SecondaryNetwork
	vmNets   []vmNetwork
	// all are the reservations of owners in the VM's namespace.
	all []ipkeeperv1alpha1.IPReservation
}

func whyVM(ctx context.Context, s *session, key types.NamespacedName) (*Report, error) {
	w, err := readVM(ctx, s, key)
	if err != nil {
		return nil, err
	}
	// In the order the report's Next lines come in.
	if err := runSteps(ctx, w.retention, w.featureGate, w.secondaryNetworks, w.launchers, w.guest, w.events); err != nil {
		return nil, err
	}
	w.conclude()
	renderVM(w.rep, w.now)
	return w.rep, nil
}

// readVM reads the VM and starts its report.
func readVM(ctx context.Context, s *session, key types.NamespacedName) (*vmWhy, error) {
	w := &vmWhy{s: s, key: key, now: s.now()}
	if err := s.client.Get(ctx, key, &w.vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &notFoundError{fmt.Sprintf("VirtualMachine %s not found", key)}
		}
		if meta.IsNoMatchError(err) {
			return nil, &notFoundError{fmt.Sprintf("VirtualMachine %s: KubeVirt is not installed (the API server does not serve VirtualMachines)", key)}
		}
		return nil, fmt.Errorf("reading VirtualMachine %s: %w", key, err)
	}
	w.facts = &VMFacts{OwnerFacts: OwnerFacts{ObjectFact: objectFact(&w.vm)}, Status: string(w.vm.Status.PrintableStatus)}
	w.rep = &Report{Object: fmt.Sprintf("VirtualMachine %s (uid %s)", key, w.vm.UID), VM: w.facts}
	return w, nil
}

// retention reads the VM's retention annotation; what the claims record
// of it (capped by the controller) shows with each claim.
func (w *vmWhy) retention(context.Context) error {
	v, ok := w.vm.Annotations[claimstatus.RetentionAnnotation]
	if !ok {
		return nil
	}
	if _, err := claimstatus.ParseRetention(v); err != nil {
		w.facts.RetentionProblem = err.Error()
		w.rep.next("fix the VM's %v; until then its addresses are not kept after its claims are released", err)
		return nil
	}
	w.facts.Retention = v
	return nil
}

// featureGate reads the KubeVirt CR's gate and who makes the claims
// (claimmaker): a user who may not list webhook configurations is told
// nothing of the latter.
func (w *vmWhy) featureGate(ctx context.Context) error {
	gateOn, err := kubevirt.CRGate{Reader: w.s.client}.Enabled(ctx)
	switch {
	case err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)):
		w.facts.FeatureGateProblem = err.Error()
	case err != nil:
		return err
	}
	w.facts.FeatureGate = gateOn
	w.external, _ = claimmaker.Detect(ctx, w.s.client)
	if w.external != "" {
		w.facts.ClaimsMaker, w.facts.ClaimsMakerWebhook = w.external, claimmaker.ExtensionsWebhook
	}
	if !gateOn && w.external == "" {
		w.rep.next("enable the %s feature gate in the KubeVirt CR (spec.configuration.developerConfiguration.featureGates; docs/kubevirt.md), or run ipkeeper-controller with --require-kubevirt-feature-gate=false", kubevirt.PersistentIPsGate)
	}
	return nil
}

// secondaryNetworks finds each Multus network's NAD, flag and claim, and
// the reservations of the claims.
func (w *vmWhy) secondaryNetworks(ctx context.Context) error {
	if w.vm.Spec.Template != nil {
		w.networks = kubevirt.SecondaryNetworks(&w.vm.Spec.Template.Spec)
	}
	var err error
	if w.all, err = listReservations(ctx, w.s.client, w.key.Namespace); err != nil {
		return err
	}
	var held []ipkeeperv1alpha1.IPReservation
	for _, n := range w.networks {
		fact, err := w.network(ctx, n)
		if err != nil {
			return err
		}
		w.facts.Networks = append(w.facts.Networks, fact)
		if fact.Problem != "" || fact.Unplugging || !fact.AllowPersistentIPs {
			continue
		}
		claimHeld, err := w.claim(ctx, w.vmNets[len(w.vmNets)-1]) // network added it
		if err != nil {
			return err
		}
		held = append(held, claimHeld...)
	}
	w.facts.Reservations = reservationFacts(held, w.now)
	return nil
}

// network reads what one network of the VM attaches: its NAD and the
// claim it keeps its addresses in.
func (w *vmWhy) network(ctx context.Context, n kubevirt.SecondaryNetwork) (VMNetworkFact, error) {
	fact := VMNetworkFact{Name: n.Name, NetworkName: n.NetworkName, MAC: n.MAC, Unplugging: n.Absent}
	if n.Absent {
		return fact, nil
	}
	nadKey, err := multus.NADRef(n.NetworkName, w.key.Namespace)
	if err != nil {
		fact.Problem = err.Error()
		w.rep.next("fix network %q of the VM: %v", n.Name, err)
		return fact, nil
	}
	nw, problem, err := readNAD(ctx, w.s.client, nadKey)
	if err != nil {
		return fact, err
	}
	if problem != "" {
		fact.Problem = problem
		w.rep.next("%s", problem)
		return fact, nil
	}
	claimName, err := claims.ClaimOf(ctx, w.s.client, w.key.Namespace, w.vm.Name, w.vm.UID, n.Name, nw.Name)
	if err != nil {
		return fact, err
	}
	w.vmNets = append(w.vmNets, vmNetwork{net: n, nad: nadKey, persistent: nw.AllowPersistentIPs, claim: claimName})
	fact.NAD, fact.NADFact, fact.Claim = nadKey.String(), nw.fact(), claimName
	if fact.FlagProblem != "" {
		w.rep.next("NetworkAttachmentDefinition %s: %s", nadKey, fact.FlagProblem)
	}
	if next := nw.unknownNext(nadKey); next != "" {
		w.rep.next("%s", next)
	}
	return fact, nil
}

// claim reads the claim of a network that keeps its addresses, and
// returns its reservations.
func (w *vmWhy) claim(ctx context.Context, vn vmNetwork) ([]ipkeeperv1alpha1.IPReservation, error) {
	claim, err := getClaim(ctx, w.s.client, types.NamespacedName{Namespace: w.key.Namespace, Name: vn.claim})
	if err != nil {
		return nil, err
	}
	fact := UsedClaim{Name: vn.claim, Network: vn.net.Name, Found: claim != nil}
	if claim == nil {
		w.facts.Claims = append(w.facts.Claims, fact)
		switch {
		case w.external != "":
			w.rep.next("the other IPAMClaims controller makes IPAMClaim %s/%s when the VM starts (a stopped VM has none); if the VM runs, check that controller", w.key.Namespace, vn.claim)
		case w.facts.FeatureGate:
			w.rep.next("ipkeeper-controller has not created IPAMClaim %s/%s: check that it runs and has a leader (docs/troubleshooting.md, The controller is down) and the VM's events", w.key.Namespace, vn.claim)
		}
		return nil, nil
	}
	held := ownedBy(w.all, ipkeeperv1alpha1.OwnerIPAMClaim, claim.UID)
	cf := claimFact(claim)
	fact.Claim = &cf
	claimNext(w.rep, claim, held)
	w.facts.Claims = append(w.facts.Claims, fact)
	return held, nil
}

// launchers reads the VM's launcher pods and whether the webhook set the
// claim reference of each network that keeps its addresses.
func (w *vmWhy) launchers(ctx context.Context) error {
	pods, err := launcherPods(ctx, w.s.client, w.key.Namespace, w.vm.Name)
	if err != nil {
		return err
	}
	for i := range pods {
		w.facts.LauncherPods = append(w.facts.LauncherPods, w.launcher(&pods[i]))
	}
	return nil
}

func (w *vmWhy) launcher(pod *corev1.Pod) LauncherPodFact {
	fact := LauncherPodFact{Name: pod.Name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName}
	elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
	if err != nil {
		fact.AnnotationProblem = err.Error()
		return fact
	}
	for _, vn := range w.vmNets {
		if !vn.persistent {
			continue
		}
		ref, mac := refFor(elems, vn.nad)
		fact.References = append(fact.References, ClaimRefFact{Network: vn.net.Name, Want: vn.claim, Reference: ref, MAC: mac})
		if ref == "" {
			w.rep.next("launcher pod %s has no %s for network %s: it was created while the webhook was down or not registered, so its addresses change on restart; restart the VM once the webhook runs", pod.Name, multus.ClaimRefKey, vn.net.Name)
		}
	}
	return fact
}

func (w *vmWhy) guest(ctx context.Context) error {
	var err error
	w.facts.Guest, err = guestInterfaces(ctx, w.s.client, w.key)
	return err
}

func (w *vmWhy) events(ctx context.Context) error {
	events, err := eventsOf(ctx, w.s.client, w.key.Namespace, "VirtualMachine", w.key.Name, w.vm.UID)
	if err != nil {
		return err
	}
	w.facts.Events = eventLines(events, 5, w.now)
	return nil
}

// conclude says what to do when no step found anything to.
func (w *vmWhy) conclude() {
	if len(w.rep.Next) > 0 {
		return
	}
	anyPersistent := false
	var nads []string
	for _, vn := range w.vmNets {
		anyPersistent = anyPersistent || vn.persistent
		nads = append(nads, vn.nad.String())
	}
	switch {
	case len(w.networks) == 0:
		w.rep.next("nothing to do: ipkeeper keeps addresses only on secondary (Multus) networks")
	case !anyPersistent:
		w.rep.next("no network of the VM keeps its addresses across restarts; to keep them, set \"allowPersistentIPs\": true at the top level of the spec.config of NetworkAttachmentDefinition %s", strings.Join(nads, ", "))
	default:
		w.rep.next("nothing to do: the VM's claims hold their addresses")
	}
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

// guestInterfaces are the VMI's interfaces as the guest agent reports
// them: name, MAC and addresses, to set beside the claims' (none without
// a running VMI or a guest agent).
func guestInterfaces(ctx context.Context, c client.Reader, key types.NamespacedName) ([]GuestInterfaceFact, error) {
	var vmi kubevirtv1.VirtualMachineInstance
	if err := c.Get(ctx, key, &vmi); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", key, err)
	}
	var out []GuestInterfaceFact
	for _, iface := range vmi.Status.Interfaces {
		if strings.Contains(iface.InfoSource, "guest-agent") {
			out = append(out, GuestInterfaceFact{Name: iface.Name, InterfaceName: iface.InterfaceName, MAC: iface.MAC, IPs: iface.IPs})
		}
	}
	return out, nil
}
