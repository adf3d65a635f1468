// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/reservationindex"
)

// A pool written less than WriteInterval ago is not even read: its
// reconcile comes back when the interval is over, so a storm of
// reservation events costs one write per pool per interval.
func TestWritesAreCoalesced(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Reconciler{WriteInterval: time.Second, Now: func() time.Time { return now }, Index: reservationindex.NewAddresses()}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "p"}}
	if wait := r.untilWritable("p"); wait > 0 {
		t.Fatalf("a pool never written waits %s", wait)
	}
	r.wrote("p")
	now = now.Add(300 * time.Millisecond)
	// Client is nil: reading the pool would panic.
	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != 700*time.Millisecond {
		t.Fatalf("Reconcile 300ms after a write = %+v, %v; want RequeueAfter 700ms", res, err)
	}
	if wait := r.untilWritable("other"); wait > 0 {
		t.Errorf("another pool waits %s for p's write", wait)
	}
	now = now.Add(700 * time.Millisecond)
	if wait := r.untilWritable("p"); wait > 0 {
		t.Errorf("still waiting %s once the interval is over", wait)
	}
	r.wrote("p")
	r.forget("p")
	if wait := r.untilWritable("p"); wait > 0 {
		t.Errorf("a deleted (forgotten) pool re-created waits %s", wait)
	}
}
