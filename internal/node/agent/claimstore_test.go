// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// staleWatch is an API server whose watch cache still shows a claim that
// was deleted and made again: its watch's initial event is the old claim
// (resourceVersion "0" reads the watch cache), while a read shows the new one.
type staleWatch struct {
	client.WithWatch
	old *ipamclaimsv1alpha1.IPAMClaim
}

func (s *staleWatch) Watch(_ context.Context, _ client.ObjectList, _ ...client.ListOption) (watch.Interface, error) {
	w := watch.NewFakeWithChanSize(1, false)
	w.Add(s.old.DeepCopy())
	return w, nil
}

// TestWaitIgnoresAClaimTheWatchCacheStillShows: a claim deleted and made
// again under the same name (a VM deleted and re-created) must not give a
// new launcher the old claim's addresses, which the garbage collector is
// about to free, because the API server's watch cache showed the old
// object a moment longer (seen in the chaos checker: seed 27, the new
// claim's pod got the old claim's addresses, whose reservations were then
// released under it).
func TestWaitIgnoresAClaimTheWatchCacheStillShows(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := ipamclaimsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	old := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1.blue", UID: "old-uid", ResourceVersion: "10"},
		Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.0.0.7/24"}},
	}
	current := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1.blue", UID: "new-uid"}}
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(current).WithStatusSubresource(current).Build()
	m, err := newMetrics(prometheus.NewRegistry(), func() int { return 0 }, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	s := &apiClaimStore{c: &staleWatch{WithWatch: live, old: old}, metrics: m}

	got, err := s.Wait(context.Background(), "ns", "vm1.blue", 500*time.Millisecond)
	if err == nil {
		t.Fatalf("Wait returned claim %s (uid %s, ips %v); want it to wait for the new claim's addresses", got.Name, got.UID, got.Status.IPs)
	}
	if got != nil {
		t.Fatalf("Wait returned %+v with error %v", got, err)
	}
}
