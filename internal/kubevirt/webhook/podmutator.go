// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// Path is where the pod webhook is served.
const Path = "/mutate-v1-pod"

var mutations = newMutations()

func newMutations() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ipkeeper_controller_webhook_pod_admissions_total",
		Help: "virt-launcher pod admissions, by result: mutated, unchanged, denied (the pod is refused for what it asks) or error (the webhook could not judge it: a read failed, or the request was malformed).",
	}, []string{"result"})
	// Every result from 0: increase() over a series born at 1 misses its
	// first count, and the first denial is the one an alert wants.
	for _, r := range []string{"mutated", "unchanged", "denied", "error"} {
		v.WithLabelValues(r)
	}
	return v
}

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{mutations}
}

// PodMutator adds claim references, and their claims' MACs, to
// virt-launcher pods.
type PodMutator struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// APIReader reads live, for objects created just before the pod (the
	// VMI, a new NAD) that the cache may not have yet.
	APIReader client.Reader
	Gate      kubevirt.Gate
	// Maker tells whether another controller's webhook sets the claim
	// references (nil: this one does).
	Maker   claims.Maker
	Decoder admission.Decoder
}

// Handle admits one pod CREATE or UPDATE.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp := m.handle(ctx, req)
	switch {
	case !resp.Allowed && resp.Result != nil && resp.Result.Code != http.StatusForbidden:
		// admission.Errored: counted apart, as a failure of the webhook
		// rather than of the pod (admission.Denied answers 403).
		mutations.WithLabelValues("error").Inc()
	case !resp.Allowed:
		mutations.WithLabelValues("denied").Inc()
	case len(resp.Patches) > 0:
		mutations.WithLabelValues("mutated").Inc()
	default:
		mutations.WithLabelValues("unchanged").Inc()
	}
	return resp
}

// handle runs the steps of one admission, each of which may end it with
// its answer: the launcher and its networks (launcherNetworks), which of
// them keep their addresses (persistentNetworks), the VMI the pod runs
// (launcherVMI), the claim references (added by addReferences, each
// checked by checkReferences) and the claims' MACs (addMACs), then the
// patch.
func (m *PodMutator) handle(ctx context.Context, req admission.Request) admission.Response {
	l, done := m.launcherNetworks(req)
	if done != nil {
		return *done
	}
	// Only references to claims the VM already holds are added while
	// nobody makes claims (the gate is off) or another controller makes
	// them and their references (its webhook, called after this one, sets
	// them; until it notices that one went, these keep running VMs on their
	// claims). Every reference, whoever set it, is checked below.
	existingOnly := m.Maker != nil && m.Maker.External()
	if !existingOnly {
		enabled, err := m.Gate.Enabled(ctx)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		existingOnly = !enabled
	}
	kept := keepAttached(l.elems, l.oldElems, func(e multus.Element) bool {
		// Unreadable: not kept, as before the webhook saw it.
		network, found, err := m.readNAD(ctx, e.NAD())
		return err == nil && found && network.AllowPersistentIPs
	})
	persistent, done := m.persistentNetworks(ctx, l)
	if done != nil {
		return *done
	}
	vmi, done := m.launcherVMI(ctx, l, persistent)
	if done != nil {
		return *done
	}
	changed, warnings, err := addReferences(l.elems, vmi.Name, kubevirt.SecondaryNetworks(&vmi.Spec), persistent,
		claims.ClaimNetworks(ctx, m.Reader, l.pod.Namespace), claims.LauncherClaimNetworks(ctx, m.Reader, vmi), existingOnly)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if done := m.checkReferences(ctx, l, persistent, vmi); done != nil {
		return *done
	}
	guestConfig := ""
	if guestnet.ReadBy(&vmi.Spec, vmi.Name) {
		guestConfig = guestnet.SecretName(vmi.Name)
	}
	macs, macWarnings, denial, err := m.addMACs(ctx, l.pod.Namespace, l.elems, persistent, guestConfig)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if denial != "" {
		return admission.Denied(fmt.Sprintf("%s: %s", l.ref, denial))
	}
	warnings = append(warnings, macWarnings...)
	if !changed && !kept && !macs {
		return admission.Allowed("claim references and MACs already set").WithWarnings(warnings...)
	}
	return patched(ctx, req, l, vmi.Name, warnings)
}

// launcher is a virt-launcher pod under admission and its networks.
type launcher struct {
	pod     corev1.Pod
	vmiName string
	// ref names the pod in answers.
	ref string
	// elems are its networks annotation's elements; oldElems those of the
	// pod before an update (nil on create, or when they did not parse).
	elems, oldElems []multus.Element
}

// launcherNetworks decodes the pod and its networks; done is the answer
// for a pod that is no launcher, or whose networks did not change or
// cannot be read.
func (m *PodMutator) launcherNetworks(req admission.Request) (l launcher, done *admission.Response) {
	end := func(r admission.Response) (launcher, *admission.Response) { return launcher{}, &r }
	if err := m.Decoder.Decode(req, &l.pod); err != nil {
		return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding pod: %w", err)))
	}
	pod := &l.pod
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	var ok bool
	if l.vmiName, ok = kubevirt.IsLauncherPod(pod); !ok {
		return end(admission.Allowed("not a virt-launcher pod"))
	}
	annotation := pod.Annotations[multus.Annotation]
	if req.Operation == admissionv1.Update {
		var old corev1.Pod
		if err := m.Decoder.DecodeRaw(req.OldObject, &old); err != nil {
			return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the old pod: %w", err)))
		}
		if old.Annotations[multus.Annotation] == annotation {
			return end(admission.Allowed("networks unchanged"))
		}
		// The old annotation parsed when the pod was admitted; a failure
		// here only means nothing is kept.
		l.oldElems, _ = multus.ParseElements(old.Annotations[multus.Annotation], pod.Namespace)
	}
	if annotation == "" {
		return end(admission.Allowed("no secondary networks"))
	}
	l.ref = fmt.Sprintf("virt-launcher pod %s/%s", pod.Namespace, podName(pod))
	elems, err := multus.ParseElements(annotation, pod.Namespace)
	if err != nil {
		return end(admission.Denied(fmt.Sprintf("%s: %v", l.ref, err)))
	}
	l.elems = elems
	return l, nil
}

// persistentNetworks returns the CNI network of each element whose NAD
// allows persistent IPs ("" for the others); done answers a launcher
// none of whose networks does, or one whose NAD cannot be judged.
func (m *PodMutator) persistentNetworks(ctx context.Context, l launcher) (persistent []string, done *admission.Response) {
	end := func(r admission.Response) ([]string, *admission.Response) { return nil, &r }
	persistent = make([]string, len(l.elems))
	anyPersistent := false
	for i, e := range l.elems {
		network, found, err := m.readNAD(ctx, e.NAD())
		if err != nil {
			var nadErr *multus.NADError
			if errors.As(err, &nadErr) {
				return end(admission.Denied(fmt.Sprintf("%s: cannot tell whether network %d keeps its IPs: %v", l.ref, i, err)))
			}
			return end(admission.Errored(http.StatusInternalServerError, err))
		}
		// A missing NAD is Multus' error to report, at attach time.
		if found && network.AllowPersistentIPs {
			persistent[i], anyPersistent = network.Name, true
		}
	}
	if !anyPersistent {
		return end(admission.Allowed("no network allows persistent IPs"))
	}
	return persistent, nil
}

// launcherVMI returns the VMI the launcher runs. The cache may predate a
// hotplug: virt-controller updates the VMI's spec, then the annotation.
// An element of a persistent network that no network of the cached VMI
// places is looked up in the live VMI.
func (m *PodMutator) launcherVMI(ctx context.Context, l launcher, persistent []string) (*kubevirtv1.VirtualMachineInstance, *admission.Response) {
	end := func(r admission.Response) (*kubevirtv1.VirtualMachineInstance, *admission.Response) { return nil, &r }
	ns := l.pod.Namespace
	vmi, err := m.readVMI(ctx, types.NamespacedName{Namespace: ns, Name: l.vmiName})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return end(admission.Denied(fmt.Sprintf("%s: its VirtualMachineInstance %s/%s (annotation %s) does not exist", l.ref, ns, l.vmiName, kubevirtv1.DomainAnnotation)))
		}
		return end(admission.Errored(http.StatusInternalServerError, err))
	}
	for i, e := range l.elems {
		if persistent[i] == "" {
			continue
		}
		if _, ok := kubevirt.LogicalNetwork(e.Interface, i, kubevirt.SecondaryNetworks(&vmi.Spec)); ok {
			continue
		}
		var fresh kubevirtv1.VirtualMachineInstance
		if err := m.APIReader.Get(ctx, client.ObjectKeyFromObject(vmi), &fresh); err != nil {
			return end(admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)))
		}
		return &fresh, nil
	}
	return vmi, nil
}

// checkReferences refuses a launcher one of whose claim references,
// whoever set it, names a claim it may not use (claimProblem).
func (m *PodMutator) checkReferences(ctx context.Context, l launcher, persistent []string, vmi *kubevirtv1.VirtualMachineInstance) *admission.Response {
	for i, e := range l.elems {
		if e.ClaimRef == "" {
			continue
		}
		if msg, err := m.claimProblem(ctx, l.pod.Namespace, e.ClaimRef, persistent[i], vmi); err != nil {
			r := admission.Errored(http.StatusInternalServerError, err)
			return &r
		} else if msg != "" {
			r := admission.Denied(fmt.Sprintf("%s: %s", l.ref, msg))
			return &r
		}
	}
	return nil
}

// patched answers with the pod's networks annotation as the steps left it.
func patched(ctx context.Context, req admission.Request, l launcher, vmiName string, warnings []string) admission.Response {
	updated, err := multus.MarshalElements(l.elems)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	pod := l.pod
	pod.Annotations[multus.Annotation] = updated
	raw, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the mutated pod: %w", err))
	}
	log.FromContext(ctx).V(1).Info("added IPAMClaim references and MACs", "pod", l.ref, "vmi", vmiName)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(warnings...)
}

// claimProblem explains why a pod must not use a claim: it is of another
// CNI network than the NAD the pod attaches with it (network; the IPAM
// would refuse it at ADD), or it still belongs to another owner, typically
// the previous VM of the same name whose launcher pod is still terminating:
// the new pod would get that VM's addresses while it still uses them.
// virt-controller retries the pod.
func (m *PodMutator) claimProblem(ctx context.Context, namespace, name, network string, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := m.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil // the controller creates it; the IPAM waits for it
		}
		return "", fmt.Errorf("reading IPAMClaim %s/%s: %w", namespace, name, err)
	}
	if network != "" && claim.Spec.Network != "" && claim.Spec.Network != network {
		return fmt.Sprintf("IPAMClaim %s/%s is for network %q (spec.network), but the pod attaches it with a NetworkAttachmentDefinition of network %q",
			namespace, name, claim.Spec.Network, network), nil
	}
	// The same rule as the claims controller and the agent: the controller
	// reference, or ipkeeper's owner labels once orphan deletion removed it.
	owner, ok := claimowner.Of(&claim)
	if !ok || owner.Runs(claimowner.LauncherOf(vmi)) {
		return "", nil // made by another tool, or this VM's own
	}
	return fmt.Sprintf("IPAMClaim %s/%s still belongs to %s, which is being deleted; the pod can be created once that %s's launcher pods are gone",
		namespace, name, owner, owner.Kind), nil
}

// readNAD reads a NAD from the cache, else live (one created just before
// the pod).
func (m *PodMutator) readNAD(ctx context.Context, key types.NamespacedName) (multus.Network, bool, error) {
	network, found, err := multus.ReadNAD(ctx, m.Reader, key)
	if err == nil && !found {
		return multus.ReadNAD(ctx, m.APIReader, key)
	}
	return network, found, err
}

func (m *PodMutator) readVMI(ctx context.Context, key types.NamespacedName) (*kubevirtv1.VirtualMachineInstance, error) {
	var vmi kubevirtv1.VirtualMachineInstance
	err := m.Reader.Get(ctx, key, &vmi)
	if apierrors.IsNotFound(err) {
		err = m.APIReader.Get(ctx, key, &vmi)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", key, err)
	}
	return &vmi, nil
}

// podName is the name for messages: launcher pods are created with
// generateName, so the name is often empty at admission.
func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "<generated>"
}
