package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
)

// podLookup finds the pod a CNI request is for: from the node's pod cache
// when it is there with the right UID, else with a live read (the cache may
// not have seen a pod bound a moment ago).
type podLookup struct {
	cached  client.Reader
	live    client.Reader
	metrics *metrics
}

// get returns the pod named in CNI_ARGS and checks its UID.
func (p *podLookup) get(ctx context.Context, args *cniproto.CNIArgs) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: args.PodNamespace, Name: args.PodName}
	pod := &corev1.Pod{}
	if err := p.cached.Get(ctx, key, pod); err == nil && string(pod.UID) == args.PodUID {
		p.metrics.podLookups.WithLabelValues("cache").Inc()
		return pod, nil
	}
	return p.getLive(ctx, args)
}

// getLive reads the pod from the API server and checks its UID.
func (p *podLookup) getLive(ctx context.Context, args *cniproto.CNIArgs) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: args.PodNamespace, Name: args.PodName}
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
	return pod, nil
}
