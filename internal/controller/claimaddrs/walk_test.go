// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/calltrace"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The walk of a claim's fill (docs/development.md, "Two walks"), counted
// at its reservation's create: from the claims' lifecycle it goes down
// through the IPAMClaim kind's steps and the claims' holder into the engine once, and the engine reaches the
// API server only through the holder's own create.
func TestFillWalksDownThroughTheEngine(t *testing.T) {
	n := nad(ns, "blue", `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`)
	f := newFixture(t, n, poolOfNAD(t, n), claim("vm1.blue"))
	var walk calltrace.Walk
	wrapped := interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*ipkeeperv1alpha1.IPReservation); ok && walk == nil {
			walk = calltrace.Here("github.com/ipkeeper/ipkeeper/")
		}
		return c.Create(ctx, obj, opts...)
	}})
	f.r.Alloc = claimalloc.New(wrapped, wrapped, syncedAddresses(t), blocks.NewSet(string(ipkeeperv1alpha1.HolderIPAMClaims)), func() bool { return true }, logr.Discard())
	if _, err := f.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "vm1.blue"}}); err != nil {
		t.Fatal(err)
	}
	walk = walk.From("Reconcile[...]") // claimlife.Reconcile: the lifecycle of every claim
	if walk == nil {
		t.Fatal("no reservation was created under Reconcile")
	}
	t.Logf("a claim's fill, at its reservation's create:\n%s", walk)
	const engine = "internal/ipam"
	pkgs := walk.Packages()
	if !slices.Contains(pkgs, engine) {
		t.Fatalf("the fill's create does not go through the engine: %v", pkgs)
	}
	allowed := []string{"internal/controller/claimlife", "internal/controller/claimaddrs", "internal/controller/claimalloc", engine, "internal/reservation", "internal/blocks"}
	for _, p := range pkgs {
		if !slices.Contains(allowed, p) {
			t.Errorf("the fill's walk goes through %s; want only %v", p, allowed)
		}
	}
	if i := slices.Index(pkgs, engine); slices.Contains(pkgs[:i], "internal/reservation") {
		t.Errorf("the fill writes through reservation before it enters the engine: %v", pkgs)
	}
}
