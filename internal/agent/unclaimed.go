// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// ipkeeper's pod webhook gives launcher pods their claim references with
// failurePolicy Ignore on creation, so that an outage of every controller
// replica blocks no VM. A launcher it did not see (created during such an
// outage) may then attach a network that keeps its addresses without a
// claim reference: given an ephemeral address, the VM would silently lose
// its address at its next start or migration. The agent refuses that ADD
// instead (CNI code 11, saying why), while the webhook is in force (the
// controller gives it rules only while KubeVirt's PersistentIPs gate is
// on; off, launchers rightly carry no references).

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

// refuseUnclaimed returns a code 11 error when elem (the attachment's
// networks annotation element, which carries no claim reference) is of a
// virt-launcher pod, through a NAD that allows persistent IPs, while the
// webhook is in force; else nil.
func (a *Agent) refuseUnclaimed(ctx context.Context, pod *corev1.Pod, req *request, elem multus.Element) error {
	if a.opts.WebhookConfigurationName == "" || a.live == nil {
		return nil
	}
	if _, ok := kubevirt.IsLauncherPod(pod); !ok {
		return nil
	}
	network, found, err := a.readNAD(ctx, elem.NAD())
	if err != nil || !found || !network.AllowPersistentIPs {
		return nil // the ephemeral path reports a NAD it cannot read
	}
	inForce, err := a.webhookInForce(ctx)
	if err != nil {
		return cniError(codeTryAgainLater, fmt.Errorf("pod %s/%s interface %s: network %q keeps its addresses, the pod references no IPAMClaim, and %w",
			pod.Namespace, pod.Name, req.IfName, req.cfg.Name, err))
	}
	if !inForce {
		return nil
	}
	return cniError(codeTryAgainLater, fmt.Errorf(
		"virt-launcher pod %s/%s interface %s attaches network %q through NetworkAttachmentDefinition %s, which keeps its addresses (allowPersistentIPs), but references no IPAMClaim: "+
			"ipkeeper's webhook did not see the pod (were all ipkeeper-controller replicas down when it was created?); an ephemeral address would be lost at the VM's next start. "+
			"Delete the pod once ipkeeper-controller runs: KubeVirt makes it again, with its claim",
		pod.Namespace, pod.Name, req.IfName, req.cfg.Name, elem.NAD()))
}

// webhookInForce reports whether ipkeeper's MutatingWebhookConfiguration
// exists and has rules.
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
		s.force = false
		for _, w := range whc.Webhooks {
			s.force = s.force || len(w.Rules) > 0
		}
	}
	s.at = time.Now()
	return s.force, nil
}
