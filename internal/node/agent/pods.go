// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// podLookup finds the pod a CNI request is for: from the node's pod cache
// when it is there with the UID the runtime passed, else with a live read
// (the cache may not have seen a pod bound a moment ago). Either way the pod
// must be bound to this agent's node: a request naming a pod this node does
// not run is refused, so one node cannot act for another node's pods.
type podLookup struct {
	cached  client.Reader
	live    client.Reader
	node    string
	metrics *metrics
}

// get returns the pod named in CNI_ARGS, checking its node and UID.
// Without K8S_POD_UID the cache cannot tell a pod from a same-name
// successor, so the pod is read live and its live UID is the identity.
func (p *podLookup) get(ctx context.Context, args *cniproto.CNIArgs) (*corev1.Pod, error) {
	if args.PodUID != "" {
		key := k8stypes.NamespacedName{Namespace: args.PodNamespace, Name: args.PodName}
		pod := &corev1.Pod{}
		if err := p.cached.Get(ctx, key, pod); err == nil && string(pod.UID) == args.PodUID && pod.Spec.NodeName == p.node {
			p.metrics.podLookups.WithLabelValues("cache").Inc()
			return pod, nil
		}
	}
	return p.getLive(ctx, args)
}

// getLive reads the pod from the API server and checks its node and UID.
func (p *podLookup) getLive(ctx context.Context, args *cniproto.CNIArgs) (*corev1.Pod, error) {
	key := k8stypes.NamespacedName{Namespace: args.PodNamespace, Name: args.PodName}
	pod := &corev1.Pod{}
	p.metrics.podLookups.WithLabelValues("api").Inc()
	if err := p.live.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %s (K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS) does not exist", key)
		}
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	if args.PodUID != "" && string(pod.UID) != args.PodUID {
		return nil, fmt.Errorf("pod %s has UID %s but CNI_ARGS K8S_POD_UID is %s (the pod was recreated; this request is for the old one)", key, pod.UID, args.PodUID)
	}
	if err := p.checkNode(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// checkNode refuses a pod not bound to this node with CNI code 4 (invalid
// environment variables): CNI_ARGS name a pod this node's runtime cannot be
// running, which no retry changes (binding is immutable), so "try again
// later" would only loop.
func (p *podLookup) checkNode(pod *corev1.Pod) error {
	switch pod.Spec.NodeName {
	case p.node:
		return nil
	case "":
		return cniError(codeInvalidEnv, fmt.Errorf("pod %s/%s (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME) is not bound to any node (spec.nodeName is empty); the agent on node %s serves only pods bound to it",
			pod.Namespace, pod.Name, p.node))
	default:
		return cniError(codeInvalidEnv, fmt.Errorf("pod %s/%s (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME) is bound to node %s, not to this agent's node %s; a runtime asks the agent of its own node",
			pod.Namespace, pod.Name, pod.Spec.NodeName, p.node))
	}
}

// codeOf is the CNI code err carries, else def.
func codeOf(err error, def uint) uint {
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return def
}
