// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"slices"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// The node side of a launcher pod, which cannot run here: the scheduler
// (binding), the kubelet (pod status, sandbox, deletion) and Multus (the
// network-status annotation, and the dynamic networks controller that
// attaches a hot-plugged network to a running pod).

// PodRunner is what runs a launcher pod's sandbox once it is bound to a
// node. Every hook is optional: a zero PodRunner is the API-only kubelet
// of integration tests (nothing runs; Multus' network-status then lists no
// addresses). The e2e cluster plugs in its kubelet, which makes a network
// namespace and runs the real Multus.
type PodRunner struct {
	// Run attaches the given pod interfaces: first when the pod starts
	// (every secondary interface; Run then makes the sandbox and runs the
	// node's CNI), then for each hotplug (the new interface, into the
	// running sandbox, as Multus' dynamic networks controller does). It
	// returns the addresses it got per pod interface, or nil.
	Run func(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error)
	// Detach removes hot-unplugged interfaces from the running sandbox.
	Detach func(ctx context.Context, pod *corev1.Pod, ifaces []string) error
	// Stop tears the sandbox down (CNI DEL) when the pod's containers end
	// or the pod is deleted.
	Stop func(ctx context.Context, pod *corev1.Pod) error
}

// defaultNetworkStatusName names the pod network's entry in the simulated
// network-status (the cluster network is not under test).
const defaultNetworkStatusName = "cluster-default"

// bindAndRun does the scheduler's and the kubelet's part for a pod: bind it
// to node (pods/binding, as kube-scheduler does), run its sandbox, write
// Multus' network-status, and report the pod Running and Ready.
func (k *KubeVirt) bindAndRun(ctx context.Context, pod *corev1.Pod, node string) (*corev1.Pod, error) {
	if err := k.ensureNode(ctx, node); err != nil {
		return nil, err
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	if err := k.C.SubResource("binding").Create(ctx, pod, binding); err != nil {
		return nil, fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
	}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s networks annotation: %w", pod.Namespace, pod.Name, err)
	}
	ifaces := make([]string, 0, len(elems))
	for _, e := range elems {
		ifaces = append(ifaces, e.Interface)
	}
	addrs, err := k.run(ctx, pod, ifaces)
	if err != nil {
		return nil, err
	}
	if err := k.writeNetworkStatus(ctx, pod, ifaces, addrs); err != nil {
		return nil, err
	}
	if err := k.setPodRunning(ctx, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

func (k *KubeVirt) run(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error) {
	if k.Kubelet.Run == nil {
		return nil, nil
	}
	addrs, err := k.Kubelet.Run(ctx, pod, ifaces)
	if err != nil {
		return nil, fmt.Errorf("running pod %s/%s (interfaces %v): %w", pod.Namespace, pod.Name, ifaces, err)
	}
	return addrs, nil
}

// ensureNode creates node, or labels an existing one, so virt-controller
// counts it as a schedulable, responsive KubeVirt node.
func (k *KubeVirt) ensureNode(ctx context.Context, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := k.C.Get(ctx, client.ObjectKeyFromObject(node), node)
	if apierrors.IsNotFound(err) {
		node.Labels = map[string]string{corev1.LabelHostname: name, SchedulableLabel: "true"}
		if err := k.C.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if node.Labels[SchedulableLabel] == "true" {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+SchedulableLabel+`":"true"}}}`))
	if err := k.C.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("labelling node %s schedulable: %w", name, err)
	}
	return nil
}

// setPodRunning writes the status a kubelet reports for a running
// virt-launcher: phase Running, every condition (and KubeVirt's readiness
// gate) True, the compute container running, init containers done.
func (k *KubeVirt) setPodRunning(ctx context.Context, pod *corev1.Pod) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.StartTime = &now
		pod.Status.Conditions = nil
		for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		for _, g := range pod.Spec.ReadinessGates {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: g.ConditionType, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		pod.Status.InitContainerStatuses = nil
		for _, c := range pod.Spec.InitContainers {
			pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}},
			})
		}
		pod.Status.ContainerStatuses = nil
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptrTo(true),
				ContainerID: "containerd://" + containerID(pod, c.Name),
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		if err := k.C.Status().Update(ctx, pod); err != nil {
			return err
		}
		return nil
	})
}

// setPodEnded reports that a pod's containers exited (phase Succeeded for
// a migration source whose domain left, Failed for a target whose migration
// failed) and tears its sandbox down, as the kubelet does.
func (k *KubeVirt) setPodEnded(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		now := metav1.Now()
		exit, reason := int32(0), "Completed"
		if phase == corev1.PodFailed {
			exit, reason = 1, "Error"
		}
		pod.Status.Phase = phase
		for i := range pod.Status.Conditions {
			if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status, c.LastTransitionTime = corev1.ConditionFalse, now
			}
		}
		for i := range pod.Status.ContainerStatuses {
			s := &pod.Status.ContainerStatuses[i]
			started := now
			if s.State.Running != nil {
				started = s.State.Running.StartedAt
			}
			s.Ready, s.Started = false, ptrTo(false)
			s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, StartedAt: started, FinishedAt: now}}
		}
		return k.C.Status().Update(ctx, pod)
	})
	if err != nil {
		return fmt.Errorf("reporting pod %s/%s %s: %w", pod.Namespace, pod.Name, phase, err)
	}
	return k.stopSandbox(ctx, pod)
}

func (k *KubeVirt) stopSandbox(ctx context.Context, pod *corev1.Pod) error {
	if k.Kubelet.Stop == nil || pod.Spec.NodeName == "" {
		return nil
	}
	if err := k.Kubelet.Stop(ctx, pod); err != nil {
		return fmt.Errorf("stopping the sandbox of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// FinishPodDeletion does the kubelet's part of deleting a bound pod whose
// deletion virt-controller requested (with a grace period): the sandbox
// goes, then the pod object (grace period 0, guarded by its UID). Tests
// that keep a launcher pod terminating (a slow kubelet) call it to let go.
func (k *KubeVirt) FinishPodDeletion(ctx context.Context, pod *corev1.Pod) error {
	if err := k.stopSandbox(ctx, pod); err != nil {
		return err
	}
	uid := pod.UID
	if err := k.C.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid}); err != nil &&
		!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// writeNetworkStatus writes Multus' k8s.v1.cni.cncf.io/network-status for
// the pod's current networks annotation, as Multus (and its dynamic
// networks controller) would: the pod network on eth0, then one entry per
// attached element: those listed already (keeping their addresses) and
// those in attach, with the addresses the PodRunner reported. An element
// gone from the annotation (unplugged) is gone from the status too. With
// RealMultus the PodRunner's Multus writes it, and nothing is done here.
func (k *KubeVirt) writeNetworkStatus(ctx context.Context, pod *corev1.Pod, attach []string, addrs map[string][]string) error {
	if k.RealMultus {
		return nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
		if err != nil {
			return err
		}
		old := podNetworkStatus(pod)
		statuses := []nadv1.NetworkStatus{{Name: defaultNetworkStatusName, Interface: "eth0", Default: true, Mac: fakeMAC(pod, "eth0")}}
		for _, e := range elems {
			prev, listed := old[e.Interface]
			if !listed && !slices.Contains(attach, e.Interface) {
				// Not attached yet: its hotplug attaches it.
				continue
			}
			ips, got := addrs[e.Interface]
			if !got {
				ips = prev.IPs
			}
			statuses = append(statuses, nadv1.NetworkStatus{
				Name: e.Namespace + "/" + e.Name, Interface: e.Interface, IPs: ips, Mac: fakeMAC(pod, e.Interface),
			})
		}
		raw, err := json.Marshal(statuses)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"annotations":     map[string]string{nadv1.NetworkStatusAnnot: string(raw)},
		}})
		if err != nil {
			return err
		}
		return k.C.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch))
	})
	if err != nil {
		return fmt.Errorf("writing the network-status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// podNetworkStatus indexes a pod's network-status by pod interface.
func podNetworkStatus(pod *corev1.Pod) map[string]nadv1.NetworkStatus {
	out := map[string]nadv1.NetworkStatus{}
	var statuses []nadv1.NetworkStatus
	if raw := pod.Annotations[nadv1.NetworkStatusAnnot]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
			return out
		}
	}
	for _, s := range statuses {
		out[s.Interface] = s
	}
	return out
}

// fakeMAC is a stable, locally administered MAC for a pod interface.
func fakeMAC(pod *corev1.Pod, iface string) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "/" + iface))
	return net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}.String()
}

func containerID(pod *corev1.Pod, container string) string {
	sum := sha256.Sum256([]byte(string(pod.UID) + "/" + container))
	return fmt.Sprintf("%x", sum[:])
}

func ptrTo[T any](v T) *T { return &v }
