// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"slices"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/go-logr/logr"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A claim whose cache is two of the controller's own status writes behind
// (the fill, then ownerPod once its launcher shows up) is never filled a
// second time: ownWrites.fresher bridges only the last write, so a third
// reconcile from the cache (a pool status event enqueues every claim the
// cache shows unfilled) sees the claim unfilled. If the reservation cache
// is behind too, the fill reserves a second address (the engine's memo
// counts the first as held), its status write conflicts, and the second
// reservation stays the claim's, held as "AddressesHeld" while the launcher
// runs: one reservation more than attachments
// (TestClaimsAndPodsNeverShareAnAddress, "241 reservations for 240").
func TestStaleCacheTwoWritesBehindDoesNotFillTwice(t *testing.T) {
	const conf = `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`
	n := nad(ns, "blue", conf)
	cl := claim("vm1.blue")
	cl.Annotations = nil // owned by nothing, as in the integration test
	f := newFixture(t, n, poolOfNAD(t, n), cl)

	var staleClaim *ipamclaimsv1alpha1.IPAMClaim // what the claim cache shows, when set
	var hideRes []string                         // reservations the reservation cache does not show yet
	cache := interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if sc, ok := obj.(*ipamclaimsv1alpha1.IPAMClaim); ok && staleClaim != nil && key.Name == staleClaim.Name {
				staleClaim.DeepCopyInto(sc)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if rl, ok := list.(*ipkeeperv1alpha1.IPReservationList); ok {
				rl.Items = slices.DeleteFunc(rl.Items, func(r ipkeeperv1alpha1.IPReservation) bool { return slices.Contains(hideRes, r.Name) })
			}
			return nil
		},
	})
	f.r.Client = cache
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: cl.Name}}

	rv1 := f.claim(t, cl.Name) // the claim as created: what the cache keeps showing
	// Reconcile 1: the fill (no launcher in the cache yet).
	f.reconcile(t, cl.Name)
	filled := f.claim(t, cl.Name)
	if len(filled.Status.IPs) != 1 {
		t.Fatalf("status.ips = %v after the fill", filled.Status.IPs)
	}
	first := f.held(t, filled)

	// The launcher is created; reconcile 2 (its pod event) runs on the
	// cache that still shows the claim as created: fresher swaps in the
	// fill, and the reconcile writes ownerPod (the second own write).
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "l0-0", CreationTimestamp: metav1.Now(),
		Annotations: map[string]string{multus.Annotation: `[{"name":"blue","` + multus.ClaimRefKey + `":"vm1.blue"}]`}}}
	if err := f.c.Create(context.Background(), launcher); err != nil {
		t.Fatal(err)
	}
	staleClaim = rv1
	f.reconcile(t, cl.Name)
	if c := f.claim(t, cl.Name); c.Status.OwnerPod == nil {
		t.Fatalf("reconcile 2 wrote no ownerPod: %+v", c.Status)
	}

	// Reconcile 3 (a pool event enqueues the claims the cache shows
	// unfilled): the claim cache still shows rv1, the reservation cache
	// does not show the fill's reservation yet.
	for _, r := range allRes(t, f) {
		hideRes = append(hideRes, r.Name)
	}
	_, err := f.r.Reconcile(context.Background(), req)
	t.Logf("reconcile 3 from the stale cache: %v", err)

	// The caches catch up; the next reconcile keeps what the claim records.
	staleClaim, hideRes = nil, nil
	f.reconcile(t, cl.Name)
	c := f.claim(t, cl.Name)
	if got := f.held(t, c); !slices.Equal(got, first) {
		t.Errorf("the claim records %v but holds %v (first fill held %v): a second fill's reservation stays while its launcher runs; conditions %+v",
			c.Status.IPs, got, first, c.Status.Conditions)
	}
}

func allRes(t *testing.T, f *fixture) []ipkeeperv1alpha1.IPReservation {
	t.Helper()
	var l ipkeeperv1alpha1.IPReservationList
	if err := f.c.List(context.Background(), &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// A fill whose reservation create landed but whose answer was lost (a
// timeout under load) is retried by the workqueue; when the reservation
// cache does not show the landed create yet, the retry's search skips the
// address (the engine's memo counts it held whatever the create returned,
// ipam.Engine.settle) and reserves another: the claim records the second
// and the first stays the claim's, held while its launcher runs.
func TestLostCreateAnswerDoesNotFillTwice(t *testing.T) {
	const conf = `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`
	n := nad(ns, "blue", conf)
	cl := claim("vm1.blue")
	cl.Annotations = nil
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "l0-0",
		Annotations: map[string]string{multus.Annotation: `[{"name":"blue","` + multus.ClaimRefKey + `":"vm1.blue"}]`}}}
	f := newFixture(t, n, poolOfNAD(t, n), cl, launcher)
	lose := true
	writer := interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			if _, ok := obj.(*ipkeeperv1alpha1.IPReservation); ok && lose {
				lose = false
				return context.DeadlineExceeded // applied, answer lost
			}
			return nil
		},
	})
	f.r.Alloc = claimalloc.New(writer, f.c, syncedAddresses(t), blocks.NewSet(string(ipkeeperv1alpha1.HolderIPAMClaims)), func() bool { return true }, logr.Discard())
	var hideRes []string
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if rl, ok := list.(*ipkeeperv1alpha1.IPReservationList); ok {
				rl.Items = slices.DeleteFunc(rl.Items, func(r ipkeeperv1alpha1.IPReservation) bool { return slices.Contains(hideRes, r.Name) })
			}
			return nil
		},
	})
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: cl.Name}}
	_, err := f.r.Reconcile(context.Background(), req)
	t.Logf("reconcile 1 (create applied, answer lost): %v", err)
	for _, r := range allRes(t, f) {
		hideRes = append(hideRes, r.Name)
	}
	f.reconcile(t, cl.Name) // the retry, before the cache shows the create
	hideRes = nil
	f.reconcile(t, cl.Name) // the cache caught up
	c := f.claim(t, cl.Name)
	if got := f.held(t, c); len(got) != 1 {
		t.Errorf("the claim records %v but holds %v; conditions %+v", c.Status.IPs, got, c.Status.Conditions)
	}
}

// A pool's status write (its counts, written as claims fill) looks at no
// claim again; a change of its spec, labels or annotations does.
func TestPoolStatusWriteLooksAtNoClaimAgain(t *testing.T) {
	old := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1, ResourceVersion: "1"}}
	status := old.DeepCopy()
	status.ResourceVersion = "2"
	status.Status.Used = 7
	spec := old.DeepCopy()
	spec.Generation, spec.ResourceVersion = 2, "3"
	annotated := old.DeepCopy()
	annotated.ResourceVersion = "4"
	annotated.Annotations = map[string]string{ipkeeperv1alpha1.InlineDefinitionAnnotation: "{}"}
	p := poolChanges()
	for _, c := range []struct {
		what string
		cur  *ipkeeperv1alpha1.IPPool
		want bool
	}{{"its status", status, false}, {"its spec", spec, true}, {"its annotations", annotated, true}} {
		if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: c.cur}); got != c.want {
			t.Errorf("an update of %s looks at the unfilled claims again: %v, want %v", c.what, got, c.want)
		}
	}
}
