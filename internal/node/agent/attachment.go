// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// Which claim, if any, an attachment may use: the one step ADD and CHECK
// take before either allocates for a pod or returns a claim's addresses.
// An attachment is claim-backed when its networks annotation element
// references an IPAMClaim (attachmentOf), or when it is a launcher
// ipkeeper's webhook did not see on a network that keeps its addresses
// (unreferencedClaim); otherwise its addresses are the pod's own. A
// claim-backed attachment is refused unless its network allows
// persistent IPs (persistentIPsAllowed) and the pod launches the claim's
// owner (mayUseClaim).

// attachment is what the pod says about the attachment a CNI request is for.
type attachment struct {
	// claim is the IPAMClaim it references, "" for an ephemeral attachment.
	claim string
	// nad is the NetworkAttachmentDefinition of its networks annotation
	// element; nil when the reference came from args.cni.
	nad *types.NamespacedName
	// found reports whether the annotation has an element for it: Multus
	// attaches only what the annotation lists, so a missing element means
	// the pod object read is older than the annotation (a hotplug just now).
	found bool
}

// attachmentOf finds the attachment's claim reference. Multus does not pass
// the reference to its delegates, so it is read from the pod's networks
// annotation element of this attachment (multus.FindElement: by interface,
// by network, by Multus' positional net<N> name); args.cni (parsed with the
// config) carries it for setups without Multus' annotation. Errors carry
// their CNI code.
func (a *Agent) attachmentOf(ctx context.Context, pod *corev1.Pod, req *request) (attachment, error) {
	var out attachment
	if annot := pod.Annotations[multus.Annotation]; annot != "" {
		elems, err := multus.ParseElements(annot, pod.Namespace)
		if err != nil {
			return out, cniError(codeInvalidConfig, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
		i, err := a.elementFor(ctx, pod, req, elems)
		if err != nil {
			return out, err
		}
		if i >= 0 {
			out.found = true
			if e := elems[i]; e.ClaimRef != "" {
				out.claim = e.ClaimRef
				key := e.NAD()
				out.nad = &key
				return out, nil
			}
			if claim, err := a.unreferencedClaim(ctx, pod, req, elems[i], i); err != nil || claim != "" {
				key := elems[i].NAD()
				out.claim, out.nad = claim, &key
				return out, err
			}
		}
	}
	if ref := req.cfg.ClaimReference; ref != "" {
		out.claim, out.found = ref, true
	}
	return out, nil
}

// elementFor picks the attachment's element; NADs (from the agent's cache
// of them) are read only when an element references a claim.
func (a *Agent) elementFor(ctx context.Context, pod *corev1.Pod, req *request, elems []multus.Element) (int, error) {
	at := multus.Attachment{
		IfName:          req.IfName,
		Network:         req.cfg.Name,
		DefaultNetworks: multus.DefaultNetworks(pod.Namespace, a.opts.MultusDefaultNetworks, a.opts.MultusSystemNamespaces),
		NetworkOf: func(e multus.Element) (string, error) {
			n, found, err := a.readNAD(ctx, e.NAD())
			if err != nil || !found {
				return "", err
			}
			return n.Name, nil
		},
	}
	i, err := multus.FindElement(elems, at)
	var nadErr *multus.NADError
	switch {
	case errors.Is(err, multus.ErrUndecidable):
		return -1, cniError(codeInvalidConfig, fmt.Errorf("pod %s/%s: %w; set \"interface\" in the elements, or run the agent with --multus-default-networks set to the number of Multus defaultNetworks",
			pod.Namespace, pod.Name, err))
	case errors.As(err, &nadErr):
		return -1, cniError(codeInvalidConfig, fmt.Errorf("pod %s/%s: finding the networks annotation element of interface %s: %w", pod.Namespace, pod.Name, req.IfName, err))
	case err != nil:
		return -1, cniError(codeTryAgainLater, fmt.Errorf("pod %s/%s: finding the networks annotation element of interface %s: %w", pod.Namespace, pod.Name, req.IfName, err))
	}
	return i, nil
}

// persistentIPsAllowed applies the one rule for whether a network keeps
// addresses (multus.ParseNAD's AllowPersistentIPs, as the controller and the
// webhook read it): the top-level flag of the attachment's NAD. Multus
// hands a delegate of a conflist only its plugin object, so the config the
// agent gets cannot show a conflist's flag; the NAD is read instead. Only a
// reference from args.cni (no annotation element, so no NAD known) falls
// back to the flag in the config the plugin was handed.
func (a *Agent) persistentIPsAllowed(ctx context.Context, req *request, pod *corev1.Pod, claimName string) error {
	subject := fmt.Sprintf("pod %s/%s interface %s references IPAMClaim %q", pod.Namespace, pod.Name, req.IfName, claimName)
	key := req.attach.nad
	if key == nil {
		if req.cfg.AllowPersistentIPs {
			return nil
		}
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
			"%s (args.cni), but network %q does not allow persistent IPs: without a networks annotation element the flag is read from the CNI config the plugin is given, which lacks \"allowPersistentIPs\": true",
			subject, req.cfg.Name))
	}
	network, found, err := a.readNAD(ctx, *key)
	var nadErr *multus.NADError
	switch {
	case errors.As(err, &nadErr):
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("%s: %w", subject, err))
	case err != nil:
		return fail(reasonInternal, codeTryAgainLater, fmt.Errorf("%s: %w", subject, err))
	case !found:
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("%s through NetworkAttachmentDefinition %s, which does not exist", subject, key))
	case !network.AllowPersistentIPs:
		where := "set \"allowPersistentIPs\": true at the top level of its spec.config"
		if p := network.FlagProblem(); p != "" {
			where = p
		}
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("%s, but network %q does not allow persistent IPs: NetworkAttachmentDefinition %s: %s",
			subject, req.cfg.Name, key, where))
	case network.Name != req.cfg.Name:
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("%s through NetworkAttachmentDefinition %s, which is network %q, but this attachment is network %q",
			subject, key, network.Name, req.cfg.Name))
	}
	return nil
}

// readNAD reads a NAD from the agent's cache of them, else live (one
// created a moment ago); found is false when it does not exist. Only
// claim-backed attachments read NADs: the cache spares every VM start an
// API read.
func (a *Agent) readNAD(ctx context.Context, key types.NamespacedName) (multus.Network, bool, error) {
	n, found, err := multus.ReadNAD(ctx, a.cache, key)
	if err != nil || found {
		return n, found, err
	}
	a.metrics.apiReads.WithLabelValues("get").Inc()
	return multus.ReadNAD(ctx, a.live, key)
}

// ipkeeper's pod webhook gives launcher pods their claim references with
// failurePolicy Ignore on creation, so that an outage of every controller
// replica blocks no VM. A launcher it did not see (created during such an
// outage) may then attach a network that keeps its addresses without a
// claim reference; given an ephemeral address, the VM would silently lose
// its address at its next start or migration. While the webhook is in
// force (it has rules and makes every reference: KubeVirt's PersistentIPs
// gate is on and no other controller makes claims; otherwise launchers
// rightly lack references to claims that nobody makes),
// the agent derives the reference the webhook would have added, by the
// same rule (the interface's logical network in the VMI's spec,
// naming.ClaimFor), and the ADD goes on as for a referenced claim: it
// waits for ipkeeper-controller to make and fill the claim. Only when the
// VMI cannot tell is the ADD refused (CNI code 11, saying why).

// webhookReferencesAnnotation is webhook.ReferencesAnnotation (the agent
// does not import the controller's packages): "all" while the webhook
// makes every claim reference.
const webhookReferencesAnnotation = "ipkeeper.io/claim-references"

// webhookCheckTTL bounds how long a look at the webhook configuration
// stands: only launchers lacking a reference on a persistent network cost
// one read, and no more than one per TTL.
const webhookCheckTTL = 10 * time.Second

// webhookScope remembers whether ipkeeper's pod webhook is in force.
type webhookScope struct {
	mu    sync.Mutex
	at    time.Time
	force bool
}

// unreferencedClaim returns the claim of elem (element index of the
// attachment's networks annotation, which carries no claim reference): ""
// when none is due (not a launcher, a network without persistent IPs, or
// the webhook not in force), the claim the webhook would have referenced,
// or a code 11 error when it cannot be told.
func (a *Agent) unreferencedClaim(ctx context.Context, pod *corev1.Pod, req *request, elem multus.Element, index int) (string, error) {
	if a.opts.WebhookConfigurationName == "" || a.live == nil {
		return "", nil
	}
	vmiName, ok := kubevirt.IsLauncherPod(pod)
	if !ok {
		return "", nil
	}
	network, found, err := a.readNAD(ctx, elem.NAD())
	if err != nil || !found || !network.AllowPersistentIPs {
		return "", nil // the ephemeral path reports a NAD it cannot read
	}
	subject := fmt.Sprintf("virt-launcher pod %s/%s interface %s attaches network %q through NetworkAttachmentDefinition %s, which keeps its addresses (allowPersistentIPs), but references no IPAMClaim",
		pod.Namespace, pod.Name, req.IfName, network.Name, elem.NAD())
	inForce, err := a.webhookInForce(ctx)
	if err != nil {
		return "", cniError(codeTryAgainLater, fmt.Errorf("%s, and %w", subject, err))
	}
	if !inForce {
		return "", nil
	}
	var vmi kubevirtv1.VirtualMachineInstance
	a.metrics.apiReads.WithLabelValues("get").Inc()
	if err := a.live.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: vmiName}, &vmi); err != nil {
		why := fmt.Errorf("reading its VirtualMachineInstance %s: %w", vmiName, err)
		if apierrors.IsNotFound(err) {
			why = fmt.Errorf("its VirtualMachineInstance %s does not exist", vmiName)
		}
		return "", cniError(codeTryAgainLater, fmt.Errorf("%s (ipkeeper's webhook did not see the pod), and %w; delete the pod once ipkeeper-controller runs: KubeVirt makes it again, with its claim", subject, why))
	}
	logical, ok := kubevirt.LogicalNetwork(elem.Interface, index, kubevirt.SecondaryNetworks(&vmi.Spec))
	if !ok {
		return "", cniError(codeTryAgainLater, fmt.Errorf("%s (ipkeeper's webhook did not see the pod), and no network of VirtualMachineInstance %s is this interface; delete the pod once ipkeeper-controller runs: KubeVirt makes it again, with its claim", subject, vmiName))
	}
	read := func(mine bool) naming.ClaimNetwork {
		launcher := claimowner.LauncherOf(&vmi)
		return func(name string) (string, bool, error) {
			c, err := a.claims.Get(ctx, pod.Namespace, name)
			switch {
			case errors.Is(err, errClaimMissing):
				return "", false, nil
			case err != nil:
				return "", false, err
			}
			if mine {
				if owner, ok := claimowner.Of(c); !ok || !owner.Runs(launcher) {
					return "", false, nil
				}
			}
			return c.Spec.Network, true, nil
		}
	}
	// The webhook's rule, with the same view of whose claims are whose.
	claim, err := naming.ClaimFor(vmi.Name, logical, network.Name, read(false), read(true))
	if err != nil {
		return "", cniError(codeTryAgainLater, fmt.Errorf("%s: choosing its claim: %w", subject, err))
	}
	a.log.Info("a launcher without its IPAMClaim reference (ipkeeper's webhook did not see it): using the claim the webhook would have referenced",
		"pod", pod.Namespace+"/"+pod.Name, "interface", req.IfName, "network", network.Name, "claim", claim)
	return claim, nil
}

// webhookInForce reports whether ipkeeper's MutatingWebhookConfiguration
// exists, has rules and makes every reference (its annotation).
func (a *Agent) webhookInForce(ctx context.Context) (bool, error) {
	s := &a.webhook
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < webhookCheckTTL {
		return s.force, nil
	}
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	a.metrics.apiReads.WithLabelValues("get").Inc()
	err := a.live.Get(ctx, client.ObjectKey{Name: a.opts.WebhookConfigurationName}, &whc)
	switch {
	case apierrors.IsNotFound(err):
		s.force = false
	case err != nil:
		return false, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", a.opts.WebhookConfigurationName, err)
	default:
		// Called, and making every reference (not only to existing claims
		// while the PersistentIPs gate is off, nor none while another
		// controller makes claims). No annotation: an older controller,
		// whose rules meant every reference.
		refs, set := whc.Annotations[webhookReferencesAnnotation]
		s.force = !set || refs == "all"
		rules := false
		for _, w := range whc.Webhooks {
			rules = rules || len(w.Rules) > 0
		}
		s.force = s.force && rules
	}
	s.at = time.Now()
	return s.force, nil
}

// mayUseClaim refuses a pod that is not a launcher of the claim's owner;
// it is the agent's one rule for who may use a claim. A claim owned by a
// VM or VMI (claimowner.Of, the rule the controller and the webhook apply)
// holds that VM's addresses; any other pod naming it would take them over.
// The pod's identity is claimowner.LauncherVMI: its controller reference
// to the VMI, whose UID its kubevirt.io/created-by label must repeat, and
// whose name must be the owner's (a VM's VMI has the VM's name; a VMI
// owner by name and UID). Only KubeVirt's controller may write or change
// them, which the launcher-identity admission policy enforces in the API
// server, so the pod read (no other round trip) is enough. Claims no VM or
// VMI owns (made by other tools) may be used by any pod of the namespace.
func (a *Agent) mayUseClaim(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	owner, ok := claimowner.Of(claim)
	if !ok {
		return nil
	}
	refuse := func(why string, args ...any) error {
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name,
			claimowner.NotRunBy(claim.Namespace, claim.Name, owner, fmt.Sprintf(why, args...))))
	}
	vmiName, vmiUID, problem := claimowner.LauncherVMI(pod)
	if problem != "" {
		return refuse("%s", problem)
	}
	if !owner.RunsVMI(vmiName, vmiUID) {
		return refuse("this pod launches VirtualMachineInstance %s (uid %s)", vmiName, vmiUID)
	}
	return nil
}
