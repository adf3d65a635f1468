// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// The contract's step 2, case by case.
func TestHold(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cluster := func(name string, paused bool, annotated bool) *clusterv1.Cluster {
		c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(paused)}}
		if annotated {
			c.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
		}
		return c
	}
	objs := []client.Object{cluster("running", false, false), cluster("paused", true, false), cluster("annotated", false, true)}
	for _, tt := range []struct {
		name          string
		claim         func(*ipamv1.IPAddressClaim)
		noClusterKind bool
		wantHold      bool
	}{
		{"no cluster", nil, false, false},
		{"running cluster", func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = "running" }, false, false},
		{"paused cluster", func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = "paused" }, false, true},
		{"paused cluster by label", func(c *ipamv1.IPAddressClaim) { c.Labels = map[string]string{clusterv1.ClusterNameLabel: "paused"} }, false, true},
		{"spec.clusterName wins over the label", func(c *ipamv1.IPAddressClaim) {
			c.Spec.ClusterName = "running"
			c.Labels = map[string]string{clusterv1.ClusterNameLabel: "paused"}
		}, false, false},
		{"annotated cluster", func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = "annotated" }, false, true},
		{"annotated claim", func(c *ipamv1.IPAddressClaim) { c.Annotations = map[string]string{clusterv1.PausedAnnotation: "true"} }, false, true},
		{"cluster not found", func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = "gone" }, false, true},
		{"cluster kind not served", func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = "running" }, true, true},
		{"deleted claim, cluster not found", func(c *ipamv1.IPAddressClaim) {
			c.Spec.ClusterName = "gone"
			c.DeletionTimestamp = ptr.To(metav1.Now())
		}, false, false},
		{"deleted claim, cluster paused", func(c *ipamv1.IPAddressClaim) {
			c.Spec.ClusterName = "paused"
			c.DeletionTimestamp = ptr.To(metav1.Now())
		}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
			if tt.claim != nil {
				tt.claim(claim)
			}
			r := &AddressClaimReconciler{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build(), WatchClusters: !tt.noClusterKind}
			why, err := r.hold(context.Background(), claim)
			if err != nil {
				t.Fatal(err)
			}
			if (why != "") != tt.wantHold {
				t.Fatalf("hold = %q, want holding: %v", why, tt.wantHold)
			}
		})
	}
}

// Only poolRefs naming an ipkeeper IPPool are served.
func TestOurs(t *testing.T) {
	for _, tt := range []struct {
		ref  ipamv1.IPPoolReference
		want bool
	}{
		{ipamv1.IPPoolReference{APIGroup: "ipkeeper.io", Kind: "IPPool", Name: "p"}, true},
		{ipamv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "p"}, false},
		{ipamv1.IPPoolReference{APIGroup: "ipkeeper.io", Kind: "GlobalInClusterIPPool", Name: "p"}, false},
		{ipamv1.IPPoolReference{APIGroup: "ipkeeper.io", Kind: "IPPool"}, false},
	} {
		if got := Ours(tt.ref); got != tt.want {
			t.Errorf("Ours(%+v) = %v, want %v", tt.ref, got, tt.want)
		}
	}
}
