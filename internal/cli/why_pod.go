// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"strings"

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

func whyPod(ctx context.Context, s *session, key types.NamespacedName) (*Report, error) {
	var pod corev1.Pod
	if err := s.client.Get(ctx, key, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &notFoundError{fmt.Sprintf("pod %s not found", key)}
		}
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	now := s.now()
	rep := &Report{Object: fmt.Sprintf("Pod %s (uid %s)", key, pod.UID)}
	podLine := fmt.Sprintf("phase %s, node %s, age %s", pod.Status.Phase, orNone(pod.Spec.NodeName), age(now, pod.CreationTimestamp.Time))
	vmi, launcher := kubevirt.IsLauncherPod(&pod)
	if launcher {
		podLine += ", virt-launcher of VirtualMachineInstance " + vmi
	}
	rep.add("Pod", podLine)

	all, err := listReservations(ctx, s.client, key.Namespace)
	if err != nil {
		return nil, err
	}
	held := ownedBy(all, ipkeeperv1alpha1.OwnerPod, pod.UID)

	// Facts about each attachment, and what is wrong with it, in the
	// order a fix has to happen.
	var nets, claimFacts []string
	elems, perr := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
	if perr != nil {
		nets = append(nets, perr.Error())
		rep.next("fix the pod's %s annotation: %v", multus.Annotation, perr)
	}
	for _, e := range elems {
		line := e.NAD().String()
		if e.Interface != "" {
			line += " interface " + e.Interface
		}
		if e.ClaimRef != "" {
			line += fmt.Sprintf(" %s %q", multus.ClaimRefKey, e.ClaimRef)
		}
		nw, problem, err := readNAD(ctx, s.client, e.NAD())
		if err != nil {
			return nil, err
		}
		if problem != "" {
			nets = append(nets, line+": "+problem)
			rep.next("%s", problem)
			continue
		}
		line += fmt.Sprintf(": CNI network %q, allowPersistentIPs %t", nw.Name, nw.AllowPersistentIPs)
		if p := nw.FlagProblem(); p != "" {
			line += " (" + p + ")"
		}
		nets = append(nets, line+nw.ignoredLine())
		if next := nw.unknownNext(e.NAD()); next != "" {
			rep.next("%s", next)
		}
		switch {
		case e.ClaimRef != "" && !nw.AllowPersistentIPs:
			rep.next("set \"allowPersistentIPs\": true at the top level of NetworkAttachmentDefinition %s's spec.config: the pod references IPAMClaim %q but the network does not keep addresses", e.NAD(), e.ClaimRef)
		case e.ClaimRef == "" && launcher && nw.AllowPersistentIPs:
			rep.next("the pod's element for %s has no %s although the network keeps addresses: the pod was created while the webhook was down or not registered, so its addresses change on restart; restart the VM once the webhook runs", e.NAD(), multus.ClaimRefKey)
		}
		if e.ClaimRef == "" {
			continue
		}
		claim, err := getClaim(ctx, s.client, types.NamespacedName{Namespace: key.Namespace, Name: e.ClaimRef})
		if err != nil {
			return nil, err
		}
		if claim == nil {
			claimFacts = append(claimFacts, fmt.Sprintf("IPAMClaim %s: not found", e.ClaimRef))
			rep.next("IPAMClaim %s/%s does not exist: ipkeeper-controller creates it for a VM while the PersistentIPs feature gate is on; check that the controller runs (kubectl ipkeeper why vm/NAME)", key.Namespace, e.ClaimRef)
			continue
		}
		held, claimFacts = foundClaim(rep, claim, all, held, claimFacts)
	}
	if len(elems) == 0 && perr == nil {
		nets = append(nets, fmt.Sprintf("no %s annotation: the pod has no secondary networks", multus.Annotation))
	}
	rep.add("Networks ("+multus.Annotation+")", nets...)
	if len(claimFacts) > 0 {
		rep.add("Claims", claimFacts...)
	}
	rep.add("Reservations", reservationLines(held, now)...)

	events, err := eventsOf(ctx, s.client, key.Namespace, "Pod", key.Name, pod.UID)
	if err != nil {
		return nil, err
	}
	var failures []corev1.Event
	for _, e := range events {
		if e.Reason == sandboxFailure {
			failures = append(failures, e)
		}
	}
	if len(failures) > 0 {
		rep.add("Last CNI failure", eventLines(failures, 1, now)...)
	} else {
		rep.add("Last CNI failure")
	}
	rep.add("Events", eventLines(events, 5, now)...)

	if len(rep.Next) > 0 {
		return rep, nil
	}
	switch {
	case len(elems) == 0:
		rep.next("nothing to do: ipkeeper allocates nothing for a pod without secondary networks")
	case len(failures) > 0 && pod.Status.Phase == corev1.PodPending:
		rep.next("%s", cniFailureNext(failures[len(failures)-1].Message))
	case len(held) > 0:
		rep.next("nothing to do: ipkeeper holds the pod's addresses")
	default:
		rep.next("no address is reserved for the pod and no CNI failure is recorded: its sandbox has not been set up yet; if that lasts, check the ipkeeper-agent of node %s", orNone(pod.Spec.NodeName))
	}
	return rep, nil
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
