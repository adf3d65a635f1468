// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/multus"
)

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
