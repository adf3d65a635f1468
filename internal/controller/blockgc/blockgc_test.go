// SPDX-License-Identifier: Apache-2.0

package blockgc

import (
	"context"
	"net/netip"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// held is HeldAddresses over a fixed set of addresses of one pool.
type held map[netip.Addr]bool

func (held) Synced() bool { return true }
func (h held) HeldIn(_ string, p netip.Prefix) bool {
	for ip := range h {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func block(pool, cidr, node string) *ipkeeperv1alpha1.IPBlock {
	p := netip.MustParsePrefix(cidr)
	return &ipkeeperv1alpha1.IPBlock{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Block(pool, p), UID: types.UID("uid-" + cidr),
			Labels: map[string]string{naming.PoolLabel: naming.PoolLabelValue(pool)}},
		Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: pool, CIDR: cidr, Holder: ipkeeperv1alpha1.HolderNode, Node: node},
	}
}

// A pool's blocks are given back when they no longer fit its ranges (cut
// from an earlier subnet), when they stay empty for the grace period, and
// all of them when the pool is deleted; a block with a held address, and
// one empty for less than the grace period, stay.
func TestBlocksGivenBack(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	// 10.0.0.0/24 cuts /30 blocks (64 of them); a /28 is from when the
	// subnet was a /22.
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}}}}
	used, empty, stale, outside := block("blue", "10.0.0.4/30", "node-a"), block("blue", "10.0.0.8/30", "node-b"),
		block("blue", "10.0.0.16/28", "node-a"), block("blue", "10.9.0.0/30", "node-c")
	other := block("green", "10.1.0.0/30", "node-a")
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool, used, empty, stale, outside, other).Build()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Reconciler{Client: c, Addrs: held{netip.MustParseAddr("10.0.0.5"): true}, Grace: 10 * time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	exists := func(b *ipkeeperv1alpha1.IPBlock) bool {
		err := c.Get(ctx, client.ObjectKeyFromObject(b), &ipkeeperv1alpha1.IPBlock{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	reconcileBlue := func() reconcile.Result {
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "blue"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := reconcileBlue()
	if exists(stale) || exists(outside) {
		t.Errorf("blocks that no longer fit the pool's ranges stay: %s %v, %s %v", stale.Spec.CIDR, exists(stale), outside.Spec.CIDR, exists(outside))
	}
	if !exists(used) || !exists(empty) || !exists(other) {
		t.Fatalf("a block in use, a block empty for no time or another pool's block was given back")
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > 10*time.Minute {
		t.Errorf("RequeueAfter = %s, want a look again within the grace period", res.RequeueAfter)
	}
	now = now.Add(9 * time.Minute)
	reconcileBlue()
	if !exists(empty) {
		t.Fatal("a block empty for 9 of 10 minutes was given back")
	}
	now = now.Add(time.Minute)
	reconcileBlue()
	if exists(empty) || !exists(used) {
		t.Errorf("after the grace period: empty block stays %v, used block gone %v", exists(empty), !exists(used))
	}

	if err := c.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	reconcileBlue()
	if exists(used) || !exists(other) {
		t.Errorf("after the pool's deletion: its block stays %v, another pool's block gone %v", exists(used), !exists(other))
	}
}
