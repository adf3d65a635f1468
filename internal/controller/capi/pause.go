// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hold says why a claim must be left alone for now, or "" to go on. It is
// step 2 of the contract: the claim or its Cluster (spec.clusterName, or the
// deprecated cluster-name label) paused, by spec.paused or the
// cluster.x-k8s.io/paused annotation; or its Cluster not found. A claim
// being deleted whose Cluster is gone is released (a deleted Cluster's
// claims must not hang): the contract holds a deletion only for a pause.
func (r *AddressClaimReconciler) hold(ctx context.Context, claim *ipamv1.IPAddressClaim) (string, error) {
	if _, ok := claim.Annotations[clusterv1.PausedAnnotation]; ok {
		return "the claim has the " + clusterv1.PausedAnnotation + " annotation", nil
	}
	name := clusterName(claim)
	if name == "" {
		return "", nil
	}
	var cluster clusterv1.Cluster
	found := false
	if r.WatchClusters {
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: name}, &cluster)
		switch {
		case err == nil:
			found = true
		case !apierrors.IsNotFound(err):
			return "", fmt.Errorf("reading Cluster %s/%s of the claim: %w", claim.Namespace, name, err)
		}
	}
	switch {
	case !found && !claim.DeletionTimestamp.IsZero():
		return "", nil
	case !found:
		return fmt.Sprintf("Cluster %s not found", name), nil
	case ptr.Deref(cluster.Spec.Paused, false):
		return fmt.Sprintf("Cluster %s is paused (spec.paused)", name), nil
	}
	if _, ok := cluster.Annotations[clusterv1.PausedAnnotation]; ok {
		return fmt.Sprintf("Cluster %s has the %s annotation", name, clusterv1.PausedAnnotation), nil
	}
	return "", nil
}
