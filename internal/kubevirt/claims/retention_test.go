// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestRetentionOf(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		set         bool
		max, want   time.Duration
		refused     string
	}{
		{name: "none", max: time.Hour},
		{name: "as written", value: "90m", set: true, max: 24 * time.Hour, want: 90 * time.Minute},
		{name: "zero", value: "0s", set: true, max: time.Hour},
		{name: "capped", value: "48h", set: true, max: 24 * time.Hour, want: 24 * time.Hour, refused: "kept for 24h0m0s"},
		{name: "none allowed", value: "1h", set: true, max: 0, refused: "--max-address-retention=0"},
		{name: "not a duration", value: "a week", set: true, max: time.Hour, refused: `"a week" is not a duration`},
		{name: "negative", value: "-1h", set: true, max: time.Hour, refused: "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			annotations := map[string]string{}
			if tc.set {
				annotations[claimstatus.RetentionAnnotation] = tc.value
			}
			got, err := retentionOf(annotations, tc.max)
			if got != tc.want {
				t.Errorf("retention %s, want %s", got, tc.want)
			}
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), claimstatus.RetentionAnnotation)):
				t.Errorf("refusal %v, want one naming the annotation and %q", err, tc.refused)
			}
		})
	}
}

// The claim records the owner's retention, and a changed retention is
// recorded again even on a filled claim (unlike a request).
func TestRetentionRecorded(t *testing.T) {
	claim := &ipamclaimsv1alpha1.IPAMClaim{}
	d := Desired{Retention: 2 * time.Hour}
	if retentionRecorded(claim, d) {
		t.Fatal("a claim without the annotation records a retention")
	}
	setRetention(claim, d)
	if claim.Annotations[claimstatus.RetentionAnnotation] != "2h0m0s" || !retentionRecorded(claim, d) {
		t.Fatalf("annotations %v after setRetention", claim.Annotations)
	}
	// Another controller may remove Finalizer and so release the claim:
	// only ipkeeper's own finalizer makes sure the retention is applied.
	if !controllerutil.ContainsFinalizer(claim, RetentionFinalizer) {
		t.Fatalf("a claim with a retention has finalizers %v, want %s", claim.Finalizers, RetentionFinalizer)
	}
	claim.Finalizers = nil
	if retentionRecorded(claim, d) {
		t.Fatal("a claim with a retention but without its finalizer counts as recorded")
	}
	setRetention(claim, d)
	if retentionRecorded(claim, Desired{}) {
		t.Fatal("a withdrawn retention counts as recorded")
	}
	setRetention(claim, Desired{})
	if _, ok := claim.Annotations[claimstatus.RetentionAnnotation]; ok || len(claim.Finalizers) != 0 {
		t.Fatalf("a withdrawn retention stays on the claim: annotations %v, finalizers %v", claim.Annotations, claim.Finalizers)
	}
}

type retainIndexer struct{ b *fake.ClientBuilder }

func (i retainIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// A released claim with a retention has its reservations retired for the
// retention or their pool's cooldown, whichever is longer, capped by the
// controller's maximum; released ones and other owners' are left alone.
func TestRetainerRetiresTheClaimsReservations(t *testing.T) {
	ctx := context.Background()
	f := newRetainFixture(t)
	now, earlier, build, reuseAfter, claim := f.now, f.earlier, f.build, f.reuseAfter, f.claim
	for _, tc := range []struct {
		name, retention        string
		max                    time.Duration
		wantKept               time.Duration
		wantCooling, wantPlain *time.Time
	}{
		{name: "no retention", max: 24 * time.Hour},
		{name: "retention", retention: "2h", max: 24 * time.Hour, wantKept: 2 * time.Hour,
			wantCooling: ptrTo(now.Add(3 * time.Hour)), wantPlain: ptrTo(now.Add(2 * time.Hour))},
		{name: "capped", retention: "72h", max: 24 * time.Hour, wantKept: 24 * time.Hour,
			wantCooling: ptrTo(now.Add(24 * time.Hour)), wantPlain: ptrTo(now.Add(24 * time.Hour))},
		{name: "edited by hand into nonsense", retention: "forever", max: 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := build()
			r := &Retainer{Reservations: c, Live: c, Writer: c, Max: tc.max, Now: func() time.Time { return now }}
			kept, err := r.retain(ctx, claim(tc.retention))
			if err != nil || kept != tc.wantKept {
				t.Fatalf("retain: kept %s, %v; want %s", kept, err, tc.wantKept)
			}
			for name, want := range map[string]*time.Time{"r-cooling": tc.wantCooling, "r-plain": tc.wantPlain, "r-released": &earlier, "r-other": nil} {
				got := reuseAfter(c, name)
				if (got == nil) != (want == nil) || got != nil && !got.Equal(*want) {
					t.Errorf("%s: reuseAfter %v, want %v", name, got, want)
				}
			}
		})
	}
}

// An IPAMClaim another controller released (it removed Finalizer, as
// ipam-extensions does on every claim labelled with a VM it saw deleted)
// is held by RetentionFinalizer until its reservations are retired for
// its retention; then the finalizer comes off and the claim goes. Without
// it, the claim went at once and the garbage collector freed its
// addresses with their pool's cooldown alone.
func TestReleaserAppliesTheRetentionOfAClaimReleasedByAnotherController(t *testing.T) {
	ctx := context.Background()
	f := newRetainFixture(t)
	claim := f.claim("2h")
	claim.Finalizers = []string{RetentionFinalizer}
	claim.DeletionTimestamp = &metav1.Time{Time: f.now}
	c := f.build(claim)
	r := &ClaimReleaser{Client: c, APIReader: c, Recorder: record.NewFakeRecorder(10),
		Retainer: &Retainer{Reservations: c, Live: c, Writer: c, Max: 24 * time.Hour, Now: func() time.Time { return f.now }}}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(claim)}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]time.Time{"r-cooling": f.now.Add(3 * time.Hour), "r-plain": f.now.Add(2 * time.Hour)} {
		if got := f.reuseAfter(c, name); got == nil || !got.Equal(want) {
			t.Errorf("%s: reuseAfter %v, want %v", name, got, want)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), &ipamclaimsv1alpha1.IPAMClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the claim is still there (%v): want it gone once its retention is applied", err)
	}
}

type retainFixture struct {
	t       *testing.T
	now     time.Time
	earlier time.Time
}

func newRetainFixture(t *testing.T) retainFixture {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	return retainFixture{t: t, now: now, earlier: now.Add(time.Minute)}
}

// build returns a client holding two pools (one with a 3h cooldown), two
// reservations of claim-uid (one per pool), one of claim-uid already
// released, one of another claim, and objs.
func (f retainFixture) build(objs ...client.Object) client.Client {
	scheme := runtime.NewScheme()
	if err := ipkeeperv1alpha1.AddToScheme(scheme); err != nil {
		f.t.Fatal(err)
	}
	if err := ipamclaimsv1alpha1.AddToScheme(scheme); err != nil {
		f.t.Fatal(err)
	}
	pool := func(name string, cooldown time.Duration) *ipkeeperv1alpha1.IPPool {
		p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if cooldown > 0 {
			p.Spec.ReuseCooldown = &ipkeeperv1alpha1.Duration{Duration: cooldown}
		}
		return p
	}
	res := func(name, poolName string, owner types.UID, reuseAfter *time.Time) *ipkeeperv1alpha1.IPReservation {
		r := &ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")}, Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: poolName, Network: "net", IP: "10.0.0.1",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm1.blue", UID: owner}}}
		if reuseAfter != nil {
			r.Spec.ReuseAfter = &metav1.Time{Time: *reuseAfter}
		}
		return r
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		pool("cooling", 3*time.Hour), pool("plain", 0),
		res("r-cooling", "cooling", "claim-uid", nil), res("r-plain", "plain", "claim-uid", nil),
		res("r-released", "plain", "claim-uid", &f.earlier), res("r-other", "plain", "other-uid", nil)).WithObjects(objs...)
	if err := reservationindex.Setup(context.Background(), retainIndexer{b}); err != nil {
		f.t.Fatal(err)
	}
	return b.Build()
}

func (f retainFixture) reuseAfter(c client.Client, name string) *time.Time {
	var r ipkeeperv1alpha1.IPReservation
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &r); err != nil {
		f.t.Fatal(err)
	}
	if r.Spec.ReuseAfter == nil {
		return nil
	}
	at := r.Spec.ReuseAfter.UTC()
	return &at
}

// claim is the claim of uid claim-uid recording retention ("" for none).
func (f retainFixture) claim(retention string) *ipamclaimsv1alpha1.IPAMClaim {
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1.blue", UID: "claim-uid"}}
	if retention != "" {
		c.Annotations = map[string]string{claimstatus.RetentionAnnotation: retention}
	}
	return c
}

func ptrTo[T any](v T) *T { return &v }
