// SPDX-License-Identifier: Apache-2.0

package capi

import (
	"context"
	"net/netip"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// builderIndexer registers the reservationindex indexes on a fake client.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// fakeWithIndexes is a fake client holding objs, with the reservation
// indexes the claim controller lists by.
func fakeWithIndexes(t *testing.T, s *runtime.Scheme, objs ...client.Object) client.Client {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...)
	if err := reservationindex.Setup(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// machines is the claims' pool, as allocation sees it: its reservations
// are named after it (a pool of no inline network).
var machines = &ipam.Pool{Name: "machines", Key: "machines"}

func testClaim() *ipamv1.IPAddressClaim {
	return &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "claim-uid"},
		Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: PoolGroup, Kind: PoolKind, Name: "machines"}},
	}
}

// claimReservation is claim's reservation of ip in pool "machines", made at created.
func claimReservation(claim *ipamv1.IPAddressClaim, ip string, created time.Time) *v1alpha1.IPReservation {
	return &v1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name: naming.Reservation("machines", netip.MustParseAddr(ip)), UID: types.UID("res-" + ip), CreationTimestamp: metav1.NewTime(created),
		},
		Spec: v1alpha1.IPReservationSpec{
			Network: "machines", Pool: "machines", IP: ip,
			Owner: v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
}

// claimIPAddress is claim's IPAddress with ip.
func claimIPAddress(t *testing.T, s *runtime.Scheme, claim *ipamv1.IPAddressClaim, ip string) *ipamv1.IPAddress {
	t.Helper()
	addr := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name},
		Spec:       ipamv1.IPAddressSpec{ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name}, PoolRef: claim.Spec.PoolRef, Address: ip},
	}
	if err := controllerutil.SetControllerReference(claim, addr, s); err != nil {
		t.Fatal(err)
	}
	return addr
}

func exists(t *testing.T, c client.Reader, name string) bool {
	t.Helper()
	err := c.Get(context.Background(), client.ObjectKey{Name: name}, &v1alpha1.IPReservation{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// A claim holding several reservations (a create whose answer was lost,
// then another) keeps the one its IPAddress names, whichever the cache
// lists first, and releases only the others; without an IPAddress it keeps
// the oldest (then the first by name).
func TestHeldKeepsTheAddressInUse(t *testing.T) {
	s := testScheme(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		older   string // address of the older reservation
		newer   string
		sameAge bool
		address string // the IPAddress's, "" for none
		want    string
	}{
		{name: "IPAddress names the newer, sorting last", older: "10.0.0.5", newer: "10.0.0.9", address: "10.0.0.9", want: "10.0.0.9"},
		{name: "IPAddress names the newer, sorting first", older: "10.0.0.9", newer: "10.0.0.5", address: "10.0.0.5", want: "10.0.0.5"},
		{name: "IPAddress names the older", older: "10.0.0.9", newer: "10.0.0.5", address: "10.0.0.9", want: "10.0.0.9"},
		{name: "no IPAddress: the older, sorting last", older: "10.0.0.9", newer: "10.0.0.5", want: "10.0.0.9"},
		{name: "no IPAddress: the older, sorting first", older: "10.0.0.5", newer: "10.0.0.9", want: "10.0.0.5"},
		{name: "no IPAddress, same age: the first by name", older: "10.0.0.9", newer: "10.0.0.5", sameAge: true, want: "10.0.0.5"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := testClaim()
			newer := t0.Add(time.Second)
			if tt.sameAge {
				newer = t0
			}
			objs := []client.Object{claim, claimReservation(claim, tt.older, t0), claimReservation(claim, tt.newer, newer)}
			if tt.address != "" {
				objs = append(objs, claimIPAddress(t, s, claim, tt.address))
			}
			c := fakeWithIndexes(t, s, objs...)
			r := &AddressClaimReconciler{Client: c, Reservations: c, APIReader: c}
			got, err := r.held(context.Background(), claim, machines)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || got.Spec.IP != tt.want {
				t.Fatalf("held = %+v, want the reservation of %s", got, tt.want)
			}
			for _, ip := range []string{tt.older, tt.newer} {
				name := naming.Reservation("machines", netip.MustParseAddr(ip))
				if got, want := exists(t, c, name), ip == tt.want; got != want {
					t.Errorf("reservation %s exists: %v, want %v", name, got, want)
				}
			}
		})
	}
}

// The IPAddress names a reservation the cache does not show yet: that one
// is kept, the cached one released.
func TestHeldPrefersTheIPAddressOverTheCache(t *testing.T) {
	s := testScheme(t)
	claim := testClaim()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r1, r2 := claimReservation(claim, "10.0.0.5", t0), claimReservation(claim, "10.0.0.9", t0.Add(time.Second))
	cached := fakeWithIndexes(t, s, claim, r1.DeepCopy())
	live := fakeWithIndexes(t, s, claim, r1.DeepCopy(), r2.DeepCopy(), claimIPAddress(t, s, claim, "10.0.0.9"))
	r := &AddressClaimReconciler{Client: cached, Reservations: cached, APIReader: live}
	got, err := r.held(context.Background(), claim, machines)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Name != r2.Name {
		t.Fatalf("held = %+v, want %s (the IPAddress's)", got, r2.Name)
	}
	if exists(t, cached, r1.Name) {
		t.Errorf("%s, which no IPAddress names, was not released", r1.Name)
	}
}

// A release whose pool the cache does not show (yet) reads it live and
// honours its cooldown: the reservation is retired, not deleted.
func TestReleaseOneReadsThePoolLive(t *testing.T) {
	s := testScheme(t)
	claim := testClaim()
	res := claimReservation(claim, "10.0.0.5", time.Now())
	pool := &v1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "machines"},
		Spec:       v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{{Range: "10.0.0.0/24"}}, ReuseCooldown: &v1alpha1.Duration{Duration: time.Minute}},
	}
	cached := fakeWithIndexes(t, s, res)
	live := fakeWithIndexes(t, s, pool)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &AddressClaimReconciler{Client: cached, Reservations: cached, APIReader: live, Now: func() time.Time { return now }}
	cur := &v1alpha1.IPReservation{}
	if err := cached.Get(context.Background(), client.ObjectKeyFromObject(res), cur); err != nil {
		t.Fatal(err)
	}
	if err := r.releaseOne(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	after := &v1alpha1.IPReservation{}
	if err := cached.Get(context.Background(), client.ObjectKeyFromObject(res), after); err != nil {
		t.Fatalf("the reservation was deleted instead of retired for the pool's 1m cooldown: %v", err)
	}
	if after.Spec.ReuseAfter == nil || !after.Spec.ReuseAfter.Time.Equal(now.Add(time.Minute)) {
		t.Errorf("reuseAfter = %v, want %s", after.Spec.ReuseAfter, now.Add(time.Minute))
	}
}

// The reservations of an inline network's pool are named from the
// network (Pool.Key), not the pool: the reservation an IPAddress names is
// looked up live under that name when the cache does not show it yet.
func TestHeldFindsTheNamedReservationByLockKey(t *testing.T) {
	s := testScheme(t)
	claim := testClaim()
	pool := &ipam.Pool{Name: "net-blue.0123456789abcdef", Key: "Blue_Net"}
	res := claimReservation(claim, "10.0.0.9", time.Now())
	res.Name = naming.Reservation(pool.Key, netip.MustParseAddr("10.0.0.9"))
	res.Spec.Pool, res.Spec.Network = pool.Name, pool.Name
	if res.Name == naming.Reservation(pool.Name, netip.MustParseAddr("10.0.0.9")) {
		t.Fatalf("the test needs a key that names reservations apart from the pool name")
	}
	cached := fakeWithIndexes(t, s, claim, claimIPAddress(t, s, claim, "10.0.0.9"))
	live := fakeWithIndexes(t, s, claim, res.DeepCopy())
	r := &AddressClaimReconciler{Client: cached, Reservations: cached, APIReader: live}
	got, err := r.held(context.Background(), claim, pool)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Name != res.Name {
		t.Fatalf("held = %+v, want %s (named from the pool's lock key)", got, res.Name)
	}
}

// A reservation the cache still shows but the API server no longer has
// (the create of an earlier reconcile, deleted again when the quota could
// not be confirmed; the deletion's event not in yet) is not the claim's:
// held reads a cached one live before keeping it, as the IPAMClaim path
// does (claimaddrs' stillHeld). Found by the chaos checker (seed 32: I2,
// then I1, an IPAddress naming an address no reservation held).
func TestHeldConfirmsACachedReservationLive(t *testing.T) {
	s := testScheme(t)
	claim := testClaim()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gone, kept := claimReservation(claim, "10.0.0.5", t0), claimReservation(claim, "10.0.0.9", t0.Add(time.Second))
	cached := fakeWithIndexes(t, s, claim, gone.DeepCopy(), kept.DeepCopy())
	live := fakeWithIndexes(t, s, claim, kept.DeepCopy())
	r := &AddressClaimReconciler{Client: cached, Reservations: cached, APIReader: live}
	got, err := r.held(context.Background(), claim, machines)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Name != kept.Name {
		t.Fatalf("held = %+v, want %s: %s, older, is gone from the API server", got, kept.Name, gone.Name)
	}

	// Only the gone one in the cache: nothing is held.
	cached = fakeWithIndexes(t, s, claim, gone.DeepCopy())
	live = fakeWithIndexes(t, s, claim)
	r = &AddressClaimReconciler{Client: cached, Reservations: cached, APIReader: live}
	if got, err := r.held(context.Background(), claim, machines); err != nil || got != nil {
		t.Fatalf("held = %+v, %v; want nothing: the cached reservation is gone", got, err)
	}
}
