// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

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
