// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// sandboxFailure is the reason of kubelet's event for a failed sandbox:
// its message carries the CNI error.
const sandboxFailure = "FailedCreatePodSandBox"

// PodReport is what why pod found, typed; the report's sections are
// rendered from it (renderPod).
type PodReport struct {
	OwnerFacts
	Phase string `json:"phase"`
	Node  string `json:"node,omitempty"`
	// VMI is the VirtualMachineInstance the pod is the virt-launcher of.
	VMI string `json:"vmi,omitempty"`
	// AnnotationProblem is why the networks annotation cannot be read.
	AnnotationProblem string           `json:"annotationProblem,omitempty"`
	Networks          []PodNetworkFact `json:"networks"`
	// LastCNIFailure is the last FailedCreatePodSandBox event, which
	// carries the CNI error.
	LastCNIFailure []string `json:"lastCNIFailure,omitempty"`
}

// PodNetworkFact is one element of the pod's networks annotation.
type PodNetworkFact struct {
	NAD       string `json:"nad"`
	Interface string `json:"interface,omitempty"`
	ClaimRef  string `json:"claimRef,omitempty"`
	// Problem is why the NAD cannot be used (missing, unreadable); the
	// NAD's facts are then unset.
	Problem string `json:"problem,omitempty"`
	NADFact
}

// podWhy is one run of why pod: what the steps read and found.
type podWhy struct {
	s     *session
	key   types.NamespacedName
	pod   corev1.Pod
	now   time.Time
	rep   *Report
	facts *PodReport
	elems []multus.Element
	// held are the pod's reservations and its claims'.
	held, all []ipkeeperv1alpha1.IPReservation
	failures  []corev1.Event
}

func whyPod(ctx context.Context, s *session, key types.NamespacedName) (*Report, error) {
	w, err := readPod(ctx, s, key)
	if err != nil {
		return nil, err
	}
	// In the order a fix has to happen: the Next lines come in it.
	if err := runSteps(ctx, w.networks, w.events); err != nil {
		return nil, err
	}
	w.conclude()
	renderPod(w.rep, w.now)
	return w.rep, nil
}

// readPod reads the pod and starts its report.
func readPod(ctx context.Context, s *session, key types.NamespacedName) (*podWhy, error) {
	w := &podWhy{s: s, key: key, now: s.now()}
	if err := s.client.Get(ctx, key, &w.pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &notFoundError{fmt.Sprintf("pod %s not found", key)}
		}
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	p := &w.pod
	w.facts = &PodReport{OwnerFacts: OwnerFacts{ObjectFact: objectFact(p)}, Phase: string(p.Status.Phase), Node: p.Spec.NodeName}
	w.facts.VMI, _ = kubevirt.IsLauncherPod(p)
	w.rep = &Report{Object: fmt.Sprintf("Pod %s (uid %s)", key, p.UID), Pod: w.facts}
	return w, nil
}

// networks reads each element of the networks annotation: its NAD, and
// the claim it references.
func (w *podWhy) networks(ctx context.Context) error {
	var err error
	if w.all, err = listReservations(ctx, w.s.client, w.key.Namespace); err != nil {
		return err
	}
	w.held = ownedBy(w.all, ipkeeperv1alpha1.OwnerPod, w.pod.UID)
	elems, perr := multus.ParseElements(w.pod.Annotations[multus.Annotation], w.pod.Namespace)
	if perr != nil {
		w.facts.AnnotationProblem = perr.Error()
		w.rep.next("fix the pod's %s annotation: %v", multus.Annotation, perr)
	}
	w.elems = elems
	for _, e := range elems {
		fact, err := w.element(ctx, e)
		if err != nil {
			return err
		}
		w.facts.Networks = append(w.facts.Networks, fact)
		if fact.Problem != "" || e.ClaimRef == "" {
			continue
		}
		if err := w.claim(ctx, e.ClaimRef); err != nil {
			return err
		}
	}
	w.facts.Reservations = reservationFacts(w.held, w.now)
	return nil
}

// element reads the NAD of one element, and says what is wrong with it.
func (w *podWhy) element(ctx context.Context, e multus.Element) (PodNetworkFact, error) {
	fact := PodNetworkFact{NAD: e.NAD().String(), Interface: e.Interface, ClaimRef: e.ClaimRef}
	nw, problem, err := readNAD(ctx, w.s.client, e.NAD())
	if err != nil {
		return fact, err
	}
	if problem != "" {
		fact.Problem = problem
		w.rep.next("%s", problem)
		return fact, nil
	}
	fact.NADFact = nw.fact()
	if next := nw.unknownNext(e.NAD()); next != "" {
		w.rep.next("%s", next)
	}
	switch {
	case e.ClaimRef != "" && !nw.AllowPersistentIPs:
		w.rep.next("set \"allowPersistentIPs\": true at the top level of NetworkAttachmentDefinition %s's spec.config: the pod references IPAMClaim %q but the network does not keep addresses", e.NAD(), e.ClaimRef)
	case e.ClaimRef == "" && w.facts.VMI != "" && nw.AllowPersistentIPs:
		w.rep.next("the pod's element for %s has no %s although the network keeps addresses: the pod was created while the webhook was down or not registered, so its addresses change on restart; restart the VM once the webhook runs", e.NAD(), multus.ClaimRefKey)
	}
	return fact, nil
}

// claim reads a claim the pod references, and adds its reservations.
func (w *podWhy) claim(ctx context.Context, name string) error {
	claim, err := getClaim(ctx, w.s.client, types.NamespacedName{Namespace: w.key.Namespace, Name: name})
	if err != nil {
		return err
	}
	used := UsedClaim{Name: name, Found: claim != nil}
	if claim == nil {
		w.rep.next("IPAMClaim %s/%s does not exist: ipkeeper-controller creates it for a VM while the PersistentIPs feature gate is on; check that the controller runs (kubectl ipkeeper why vm/NAME)", w.key.Namespace, name)
	} else {
		cf := claimFact(claim)
		used.Claim = &cf
		claimHeld := ownedBy(w.all, ipkeeperv1alpha1.OwnerIPAMClaim, claim.UID)
		claimNext(w.rep, claim, claimHeld)
		w.held = append(w.held, claimHeld...)
	}
	w.facts.Claims = append(w.facts.Claims, used)
	return nil
}

// events reads the pod's events and its last sandbox failure.
func (w *podWhy) events(ctx context.Context) error {
	events, err := eventsOf(ctx, w.s.client, w.key.Namespace, "Pod", w.key.Name, w.pod.UID)
	if err != nil {
		return err
	}
	for _, e := range events {
		if e.Reason == sandboxFailure {
			w.failures = append(w.failures, e)
		}
	}
	w.facts.LastCNIFailure = eventLines(w.failures, 1, w.now)
	w.facts.Events = eventLines(events, 5, w.now)
	return nil
}

// conclude says what to do when no step found anything to.
func (w *podWhy) conclude() {
	if len(w.rep.Next) > 0 {
		return
	}
	switch {
	case len(w.elems) == 0:
		w.rep.next("nothing to do: ipkeeper allocates nothing for a pod without secondary networks")
	case len(w.failures) > 0 && w.pod.Status.Phase == corev1.PodPending:
		w.rep.next("%s", cniFailureNext(w.failures[len(w.failures)-1].Message))
	case len(w.held) > 0:
		w.rep.next("nothing to do: ipkeeper holds the pod's addresses")
	default:
		w.rep.next("no address is reserved for the pod and no CNI failure is recorded: its sandbox has not been set up yet; if that lasts, check the ipkeeper-agent of node %s", orNone(w.pod.Spec.NodeName))
	}
}

// renderPod adds the sections of rep.Pod to rep.
func renderPod(rep *Report, now time.Time) {
	f := rep.Pod
	podLine := fmt.Sprintf("phase %s, node %s, age %s", f.Phase, orNone(f.Node), age(now, f.Created))
	if f.VMI != "" {
		podLine += ", virt-launcher of VirtualMachineInstance " + f.VMI
	}
	rep.add("Pod", podLine)
	rep.add("Networks ("+multus.Annotation+")", podNetworkLines(f)...)
	if len(f.Claims) > 0 {
		rep.add("Claims", usedClaimLines(f.Claims)...)
	}
	rep.add("Reservations", factLines(f.Reservations, now)...)
	rep.add("Last CNI failure", f.LastCNIFailure...)
	rep.add("Events", f.Events...)
}

func podNetworkLines(f *PodReport) []string {
	var out []string
	if f.AnnotationProblem != "" {
		out = append(out, f.AnnotationProblem)
	}
	for _, n := range f.Networks {
		line := n.NAD
		if n.Interface != "" {
			line += " interface " + n.Interface
		}
		if n.ClaimRef != "" {
			line += fmt.Sprintf(" %s %q", multus.ClaimRefKey, n.ClaimRef)
		}
		if n.Problem != "" {
			out = append(out, line+": "+n.Problem)
			continue
		}
		out = append(out, line+": "+n.line())
	}
	if len(f.Networks) == 0 && f.AnnotationProblem == "" {
		out = append(out, fmt.Sprintf("no %s annotation: the pod has no secondary networks", multus.Annotation))
	}
	return out
}

// cniFailureNext maps the documented agent errors (docs/troubleshooting.md
// "Errors users see") to what to do.
func cniFailureNext(msg string) string {
	switch {
	case strings.Contains(msg, "is exhausted"):
		return "the pool is exhausted: grow it (add a range, widen range_start/range_end, drop excludes) or free leaked reservations (kubectl ipkeeper leaks); see kubectl ipkeeper pools"
	case strings.Contains(msg, "already reserved by"):
		return "the requested address is held by someone else: free it (kubectl ipkeeper who-has IP) or request another"
	case strings.Contains(msg, "does not allow persistent IPs"):
		return "set \"allowPersistentIPs\": true at the top level of the NAD's spec.config (the error names the NAD)"
	case strings.Contains(msg, "IPAMClaim not found"):
		return "the claim did not appear in time: check that ipkeeper-controller runs and has a leader, the PersistentIPs feature gate, and the VM's events (kubectl ipkeeper why vm/NAME)"
	case strings.Contains(msg, "ipkeeper-agent is not reachable"), strings.Contains(msg, "is not ready"):
		return "the node's ipkeeper-agent is not serving: check its pod and logs"
	}
	return "the last CNI error above says what failed; docs/troubleshooting.md (Errors users see) lists the fixes"
}

// nadNetwork is what why reports of a NAD: its network, the
// whereabouts-only ipam keys it still sets (ipamconfig's IgnoredKeys) and
// the keys nobody reads, with their "did you mean" (UnknownKeys).
type nadNetwork struct {
	multus.Network
	ignored, unknown []string
}

// NADFact is what a why report states of the NAD a network attaches.
type NADFact struct {
	CNINetwork         string `json:"cniNetwork,omitempty"`
	AllowPersistentIPs bool   `json:"allowPersistentIPs"`
	// FlagProblem is an allowPersistentIPs set where it is ignored.
	FlagProblem string   `json:"flagProblem,omitempty"`
	UnknownKeys []string `json:"unknownKeys,omitempty"`
	IgnoredKeys []string `json:"ignoredKeys,omitempty"`
}

func (n nadNetwork) fact() NADFact {
	return NADFact{CNINetwork: n.Name, AllowPersistentIPs: n.AllowPersistentIPs, FlagProblem: n.FlagProblem(), UnknownKeys: n.unknown, IgnoredKeys: n.ignored}
}

// line renders the fact as the reports' network lines end.
func (f NADFact) line() string {
	line := fmt.Sprintf("CNI network %q, allowPersistentIPs %t", f.CNINetwork, f.AllowPersistentIPs)
	if f.FlagProblem != "" {
		line += " (" + f.FlagProblem + ")"
	}
	return line + nadNetwork{ignored: f.IgnoredKeys, unknown: f.UnknownKeys}.ignoredLine()
}

// ignoredLine is the fact why adds for a NAD that sets keys ipkeeper
// ignores, "" when it sets none.
func (n nadNetwork) ignoredLine() string {
	line := ""
	if len(n.unknown) > 0 {
		line += "; ipam keys ipkeeper does not know (ignored): " + strings.Join(n.unknown, ", ")
	}
	if len(n.ignored) > 0 {
		line += "; whereabouts keys ipkeeper ignores (no effect, can be removed): " + strings.Join(n.ignored, ", ")
	}
	return line
}

// unknownNext is what why says to do of a NAD's unknown keys, "" for none.
func (n nadNetwork) unknownNext(key types.NamespacedName) string {
	if len(n.unknown) == 0 {
		return ""
	}
	return fmt.Sprintf("NetworkAttachmentDefinition %s sets ipam keys ipkeeper does not know, which it ignores: %s: fix or remove them", key, strings.Join(n.unknown, ", "))
}

// readNAD reads and parses a NAD. problem describes, for people, a NAD
// that is missing or cannot be parsed; err is any other failure.
func readNAD(ctx context.Context, c client.Reader, key types.NamespacedName) (nw nadNetwork, problem string, err error) {
	var nad nadv1.NetworkAttachmentDefinition
	err = c.Get(ctx, key, &nad)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nw, fmt.Sprintf("NetworkAttachmentDefinition %s does not exist: create it or fix the reference", key), nil
	case err != nil:
		return nw, "", fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
	}
	var perr error
	if nw.Network, perr = multus.ParseNAD(&nad); perr != nil {
		return nw, "fix " + perr.Error(), nil
	}
	if conf, found, err := multus.PluginConfig(&nad, ipamconfig.PluginType); err == nil && found {
		cfg, err := ipamconfig.Parse(conf)
		if err != nil {
			return nw, fmt.Sprintf("fix NetworkAttachmentDefinition %s: %v (ipkeeper-agent refuses it, CNI error 7)", key, err), nil
		}
		nw.ignored, nw.unknown = cfg.IgnoredKeys, cfg.UnknownKeyList()
	}
	if nw.Name == "" {
		return nw, fmt.Sprintf("NetworkAttachmentDefinition %s has an empty spec.config (Multus reads it from a file on the node); ipkeeper cannot tell what it does", key), nil
	}
	return nw, "", nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
