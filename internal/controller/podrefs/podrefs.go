// SPDX-License-Identifier: Apache-2.0

// Package podrefs is how ipkeeper-controller sees pods: their metadata
// only, indexed by the IPAMClaims their Multus networks annotation
// references. Every controller that reads pods reads this one view, from
// the main manager's cache: the KubeVirt support's manager reads it
// through that cache too (the manager's sharedFromMain), so the
// controller holds one watch of pods and one copy of each.
package podrefs

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// IndexClaim maps pods to the claims ("name", in the pod's namespace)
// their networks annotation references.
const IndexClaim = "ipkeeper.podClaim"

var (
	podGVK     = corev1.SchemeGroupVersion.WithKind("Pod")
	podListGVK = corev1.SchemeGroupVersion.WithKind("PodList")
)

// Metadata is the object pods are cached as: labels, annotations, owners
// and UID are all the controller reads, a fraction of a whole pod.
func Metadata() *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(podGVK)
	return p
}

// MetadataList is Metadata's list type.
func MetadataList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(podListGVK)
	return l
}

// IsPodMetadata reports whether obj is Metadata or MetadataList: what a
// cache shared with the main manager reads from it.
func IsPodMetadata(obj any) bool {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return o.GroupVersionKind() == podGVK
	case *metav1.PartialObjectMetadataList:
		return o.GroupVersionKind() == podListGVK
	}
	return false
}

// IsPodKind reports whether gvk is a pod's.
func IsPodKind(gvk schema.GroupVersionKind) bool { return gvk == podGVK }

// Claims is IndexClaim's function: the claims pod references.
func Claims(pod client.Object) []string {
	return multus.ClaimRefs(pod.GetAnnotations()[multus.Annotation], pod.GetNamespace())
}

// SetupIndex registers IndexClaim. It is the main manager's, registered
// once before it starts.
func SetupIndex(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, Metadata(), IndexClaim, Claims); err != nil {
		return fmt.Errorf("indexing pods by %s: %w", IndexClaim, err)
	}
	return nil
}

// Referencing lists the pods of namespace whose networks annotation
// references claim, from a cache with SetupIndex's index.
func Referencing(ctx context.Context, reader client.Reader, namespace, claim string) ([]metav1.PartialObjectMetadata, error) {
	pods := MetadataList()
	if err := reader.List(ctx, pods, client.InNamespace(namespace), client.MatchingFields{IndexClaim: claim}); err != nil {
		return nil, fmt.Errorf("listing the pods that use IPAMClaim %s/%s: %w", namespace, claim, err)
	}
	return pods.Items, nil
}

// ClaimRequests maps a pod to a request for each claim it references: a
// pod's change looks at its claims again.
func ClaimRequests(_ context.Context, pod client.Object) []reconcile.Request {
	refs := Claims(pod)
	reqs := make([]reconcile.Request, 0, len(refs))
	for _, ref := range refs {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: pod.GetNamespace(), Name: ref}})
	}
	return reqs
}

// MetadataChanged lets through a pod's updates that change what the
// controllers read of it (labels, annotations, owners, its deletion): a
// pod's status changes (scheduled, started, ready), which a launcher goes
// through several times as it starts, change only its resourceVersion
// here, and a reconcile of its claims for each would read its VM and VMI
// for nothing.
func MetadataChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld, e.ObjectNew
		if old == nil || cur == nil {
			return true
		}
		return !equality.Semantic.DeepEqual(old.GetLabels(), cur.GetLabels()) ||
			!equality.Semantic.DeepEqual(old.GetAnnotations(), cur.GetAnnotations()) ||
			!equality.Semantic.DeepEqual(old.GetOwnerReferences(), cur.GetOwnerReferences()) ||
			!equality.Semantic.DeepEqual(old.GetDeletionTimestamp(), cur.GetDeletionTimestamp()) ||
			old.GetUID() != cur.GetUID()
	}}
}
