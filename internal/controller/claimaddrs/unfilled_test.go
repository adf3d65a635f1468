// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A claim of a served network counts as unfilled from its creation until
// its addresses are recorded; a claim of another network never counts, and
// a deleted one stops counting.
func TestUnfilledClaimsMetric(t *testing.T) {
	const conf = `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","range_start":"10.0.0.4","range_end":"10.0.0.5"}}`
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	n := nad(ns, "blue", conf)
	other := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: ns, Name: "web", UID: "uid-web"}
	waiting := claim("vm1.blue")
	waiting.CreationTimestamp = metav1.NewTime(created)
	foreign := claim("other.net")
	foreign.Annotations = nil
	foreign.Spec.Network = "not-ours"
	foreign.CreationTimestamp = metav1.NewTime(created.Add(-time.Hour))
	f := newFixture(t, n, poolOfNAD(t, n), waiting, foreign, heldRes("10.0.0.4", other), heldRes("10.0.0.5", other))
	remove := unfilledMetrics.Add(f.r.unfilled.Stats)
	t.Cleanup(remove)

	count := func(want string) {
		t.Helper()
		exp := "# HELP ipkeeper_controller_claims_unfilled IPAMClaims of networks ipkeeper serves that have no addresses in status.ips yet (exported by the leader; 0 on the other replicas).\n" +
			"# TYPE ipkeeper_controller_claims_unfilled gauge\nipkeeper_controller_claims_unfilled " + want + "\n"
		if err := testutil.CollectAndCompare(unfilledMetrics, strings.NewReader(exp), "ipkeeper_controller_claims_unfilled"); err != nil {
			t.Error(err)
		}
	}
	count("0")
	f.reconcile(t, "vm1.blue") // exhausted
	f.reconcile(t, "other.net")
	count("1")
	if n, oldest := f.r.unfilled.Stats(created.Add(time.Hour)); n != 1 || oldest != time.Hour {
		t.Errorf("unfilled = %d, oldest %s; want 1, 1h (the exhausted claim since its creation)", n, oldest)
	}

	// The pool grows: the claim is filled and no longer counts.
	var pool ipkeeperv1alpha1.IPPool
	if err := f.c.Get(context.Background(), client.ObjectKey{Name: "blue"}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Ranges[0].RangeEnd = "10.0.0.6"
	if err := f.c.Update(context.Background(), &pool); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, "vm1.blue")
	if c := f.claim(t, "vm1.blue"); len(c.Status.IPs) != 1 {
		t.Fatalf("status.ips = %v once the pool grew", c.Status.IPs)
	}
	count("0")

	// Another exhausted claim, then deleted: it stops counting.
	late := claim("vm2.blue")
	if err := f.c.Create(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, "vm2.blue")
	count("1")
	if err := f.c.Delete(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, "vm2.blue")
	count("0")
}
