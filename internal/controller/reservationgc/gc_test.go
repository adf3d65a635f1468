// SPDX-License-Identifier: Apache-2.0

package reservationgc

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// The per-reservation "missing since" memory must not outlive the
// reservation: a CNI DEL usually releases it during the grace period, and
// every such reservation would otherwise stay in the map forever.
func TestMissingSinceForgottenWithTheReservation(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	res := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: "net.10-0-0-1", CreationTimestamp: metav1.Now()},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Network: "net", IP: "10.0.0.1", InterfaceName: "net1",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "gone", UID: "u1"},
		},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(res).Build()
	r := &Reconciler{Client: c, APIReader: c, GracePeriod: time.Hour}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}}

	if out, err := r.Reconcile(ctx, req); err != nil || out.RequeueAfter <= 0 {
		t.Fatalf("pod missing within the grace period: %+v, %v; want a requeue", out, err)
	}
	if len(r.missingSince) != 1 {
		t.Fatalf("missingSince = %v, want the reservation recorded", r.missingSince)
	}
	if err := c.Delete(ctx, res); err != nil { // released by a CNI DEL meanwhile
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if len(r.missingSince) != 0 {
		t.Fatalf("missingSince = %v after the reservation is gone, want empty", r.missingSince)
	}
}

// Found by the chaos checker: an owner created and deleted while the
// collector's watch on its kind was down never enters the cache, so its
// deletion sends no event. A reservation judged while the owner existed
// only live (the cache behind) must be looked at again, or it outlives the
// owner for good.
func TestOwnerSeenOnlyLiveIsCheckedAgain(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ipamclaimsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kind  ipkeeperv1alpha1.OwnerKind
		owner client.Object
	}{
		{ipkeeperv1alpha1.OwnerPod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}},
		{ipkeeperv1alpha1.OwnerIPAMClaim, &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}},
	} {
		t.Run(string(tt.kind), func(t *testing.T) {
			res := &ipkeeperv1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: "net.10-0-0-1", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
				Spec: ipkeeperv1alpha1.IPReservationSpec{
					Network: "net", IP: "10.0.0.1", InterfaceName: "net1",
					Owner: ipkeeperv1alpha1.ReservationOwner{Kind: tt.kind, Namespace: "ns", Name: "p", UID: "u1"},
				},
			}
			cache := fake.NewClientBuilder().WithScheme(s).WithObjects(res).Build() // has not seen the owner
			api := fake.NewClientBuilder().WithScheme(s).WithObjects(tt.owner).Build()
			now := time.Now()
			r := &Reconciler{Client: cache, APIReader: api, GracePeriod: time.Minute, Now: func() time.Time { return now }}
			ctx := context.Background()
			req := reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}}
			out, err := r.Reconcile(ctx, req)
			if err != nil || out.RequeueAfter <= 0 {
				t.Fatalf("owner alive only in the API server: %+v, %v; want a requeue to look again", out, err)
			}
			if err := api.Delete(ctx, tt.owner); err != nil { // deleted while the watch is still down
				t.Fatal(err)
			}
			for range 2 { // a pod's grace period runs from its first miss
				if out, err = r.Reconcile(ctx, req); err != nil {
					t.Fatal(err)
				}
				if out.RequeueAfter == 0 {
					break
				}
				now = now.Add(out.RequeueAfter)
			}
			if err := cache.Get(ctx, client.ObjectKeyFromObject(res), &ipkeeperv1alpha1.IPReservation{}); !apierrors.IsNotFound(err) {
				t.Fatalf("reservation of the deleted owner still there (%v)", err)
			}
		})
	}
}

// stubReader answers every Get with err, or with an object of uid.
type stubReader struct {
	client.Reader
	uid types.UID
	err error
}

func (s stubReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if s.err != nil {
		return s.err
	}
	obj.SetUID(s.uid)
	return nil
}

// A Cluster API IPAddressClaim is read live (its CRDs come and go, so the
// collector has no cache of them): released when gone or replaced, kept
// while it exists, and kept (looked at again later) while the API server
// does not serve the kind at all.
func TestIPAddressClaimOwner(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: IPAddressClaimGVK.Group, Resource: "ipaddressclaims"}, "m1")
	for _, tt := range []struct {
		name        string
		live        stubReader
		wantGone    bool
		wantRequeue bool
	}{
		{"exists", stubReader{uid: "u1"}, false, false},
		{"gone", stubReader{err: notFound}, true, false},
		{"recreated under its name", stubReader{uid: "u2"}, true, false},
		{"kind not served", stubReader{err: &meta.NoKindMatchError{GroupKind: IPAddressClaimGVK.GroupKind()}}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := &ipkeeperv1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: "pool.10-0-0-1"},
				Spec: ipkeeperv1alpha1.IPReservationSpec{
					Network: "pool", Pool: "pool", IP: "10.0.0.1",
					Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAddressClaim, Namespace: "ns", Name: "m1", UID: "u1"},
				},
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(res).Build()
			r := &Reconciler{Client: c, APIReader: tt.live}
			ctx := context.Background()
			out, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.RequeueAfter > 0; got != tt.wantRequeue {
				t.Errorf("requeue after %s, want a requeue: %v", out.RequeueAfter, tt.wantRequeue)
			}
			err = c.Get(ctx, client.ObjectKeyFromObject(res), &ipkeeperv1alpha1.IPReservation{})
			if gone := apierrors.IsNotFound(err); gone != tt.wantGone {
				t.Errorf("reservation released: %v (%v), want %v", gone, err, tt.wantGone)
			}
		})
	}
}

// A claim's reservation lent to a decentralized live migration's receiver:
// its owner gone (the source VM deleted), it passes to the receiver's
// claim, whose launcher may run with it, rather than being freed; the
// receiver's claim gone, the owner keeps it, lent to nobody.
func TestLentReservation(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "a", Name: "vm1.blue", UID: "claim-a"}
	borrower := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "b", Name: "vm1r.blue", UID: "claim-b"}
	claimOf := func(o ipkeeperv1alpha1.ReservationOwner) *ipamclaimsv1alpha1.IPAMClaim {
		return &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID}}
	}
	for _, tt := range []struct {
		name                string
		live                []client.Object
		wantOwner, wantLent types.UID
	}{
		{"the owner gone: passed to the claim it was lent to", []client.Object{claimOf(borrower)}, borrower.UID, ""},
		{"the borrower gone: the owner keeps it", []client.Object{claimOf(owner)}, owner.UID, ""},
		{"both there: nothing changes", []client.Object{claimOf(owner), claimOf(borrower)}, owner.UID, borrower.UID},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := &ipkeeperv1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: "blue.10-0-0-5", CreationTimestamp: metav1.Now()},
				Spec:       ipkeeperv1alpha1.IPReservationSpec{Pool: "blue", Network: "blue", IP: "10.0.0.5", Owner: owner, LentTo: &borrower},
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(append(tt.live, res)...).Build()
			r := &Reconciler{Client: c, APIReader: c, GracePeriod: time.Hour}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: res.Name}}); err != nil {
				t.Fatal(err)
			}
			var got ipkeeperv1alpha1.IPReservation
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(res), &got); err != nil {
				t.Fatalf("the reservation: %v (want it kept)", err)
			}
			lent := types.UID("")
			if got.Spec.LentTo != nil {
				lent = got.Spec.LentTo.UID
			}
			if got.Spec.Owner.UID != tt.wantOwner || lent != tt.wantLent || got.Spec.Released() {
				t.Fatalf("owner %s lentTo %q released %v; want owner %s lentTo %q, held", got.Spec.Owner.UID, lent, got.Spec.Released(), tt.wantOwner, tt.wantLent)
			}
		})
	}
}
