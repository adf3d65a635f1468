package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/nad"
	"github.com/ipkeeper/ipkeeper/internal/netselect"
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
// annotation element of this attachment (netselect.ElementFor: by
// interface, by network, by Multus' positional net<N> name); args.cni
// carries it for setups without Multus' annotation. Errors carry their CNI
// code.
func (a *Agent) attachmentOf(ctx context.Context, pod *corev1.Pod, req *request) (attachment, error) {
	var out attachment
	if annot := pod.Annotations[nadv1.NetworkAttachmentAnnot]; annot != "" {
		elems, err := netselect.Parse(annot, pod.Namespace)
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
				out.nad = &types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
				return out, nil
			}
		}
	}
	ref, err := argsClaimRef(req.Config)
	if err != nil {
		return out, cniError(codeInvalidConfig, err)
	}
	if ref != "" {
		out.claim, out.found = ref, true
	}
	return out, nil
}

// elementFor picks the attachment's element. Which element it is matters
// only if one of the candidates references a claim, so the NADs (a live
// read each) are read only then.
func (a *Agent) elementFor(ctx context.Context, pod *corev1.Pod, req *request, elems []netselect.Element) (int, error) {
	at := netselect.Attachment{IfName: req.IfName, Network: req.cfg.Name, DefaultNetworks: a.multusDefaultNetworks(pod.Namespace)}
	if !slices.ContainsFunc(elems, func(e netselect.Element) bool { return e.ClaimRef != "" }) {
		// No claim either way; only whether the attachment is listed at
		// all matters: by interface, or possibly by position.
		if i := slices.IndexFunc(elems, func(e netselect.Element) bool { return e.Interface == req.IfName }); i >= 0 {
			return i, nil
		}
		return slices.IndexFunc(elems, func(e netselect.Element) bool { return e.Interface == "" }), nil
	}
	at.NetworkOf = func(e netselect.Element) (string, error) {
		n, found, err := a.readNAD(ctx, types.NamespacedName{Namespace: e.Namespace, Name: e.Name})
		if err != nil || !found {
			return "", err
		}
		return n.Name, nil
	}
	i, err := netselect.ElementFor(elems, at)
	var nadErr *nad.Error
	switch {
	case errors.Is(err, netselect.ErrUndecidable):
		return -1, cniError(codeInvalidConfig, fmt.Errorf("pod %s/%s: %w; set \"interface\" in the elements, or run the agent with --multus-default-networks set to the number of Multus defaultNetworks",
			pod.Namespace, pod.Name, err))
	case errors.As(err, &nadErr):
		return -1, cniError(codeInvalidConfig, fmt.Errorf("pod %s/%s: finding the networks annotation element of interface %s: %w", pod.Namespace, pod.Name, req.IfName, err))
	case err != nil:
		return -1, cniError(codeTryAgainLater, fmt.Errorf("pod %s/%s: finding the networks annotation element of interface %s: %w", pod.Namespace, pod.Name, req.IfName, err))
	}
	return i, nil
}

// multusDefaultNetworks is how many Multus default networks precede the
// annotation's elements for pods of namespace: none in Multus' system
// namespaces, else the configured count (negative: unknown).
func (a *Agent) multusDefaultNetworks(namespace string) int {
	system := a.opts.MultusSystemNamespaces
	if system == nil {
		system = []string{"kube-system"} // Multus' default systemNamespaces
	}
	if slices.Contains(system, namespace) {
		return 0
	}
	return a.opts.MultusDefaultNetworks
}

// readNAD reads and parses a NetworkAttachmentDefinition, live: only
// claim-backed ADDs need one, and a NAD edited a moment ago must count.
func (a *Agent) readNAD(ctx context.Context, key types.NamespacedName) (nad.Network, bool, error) {
	var n nadv1.NetworkAttachmentDefinition
	if err := a.pods.live.Get(ctx, key, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return nad.Network{}, false, nil
		}
		return nad.Network{}, false, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
	}
	network, err := nad.Parse(&n)
	return network, true, err
}

// argsClaimRef reads args.cni.ipam-claim-reference from the CNI config.
func argsClaimRef(config []byte) (string, error) {
	var conf struct {
		Args struct {
			CNI map[string]any `json:"cni"`
		} `json:"args"`
	}
	if err := json.Unmarshal(config, &conf); err != nil {
		return "", fmt.Errorf("args.cni: %w", err)
	}
	switch v := conf.Args.CNI[netselect.ClaimRefKey].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", fmt.Errorf("args.cni.%s: want a claim name (string), got %v", netselect.ClaimRefKey, v)
	}
}

// persistentIPsAllowed applies the one rule for whether a network keeps
// addresses (nad.Network.AllowPersistentIPs, as the controller and the
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
	var nadErr *nad.Error
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
