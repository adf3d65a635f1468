// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var receiver = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAMClaim, Namespace: "other", Name: "vm1.blue", UID: "receiver-uid"}

// writeCounter is a KubeStore over a fake client that counts the writes
// made through it by method, so a test sees each handover step is one
// update and nothing else.
type writeCounter struct {
	store  KubeStore
	raw    client.WithWatch
	writes map[string]int
}

func newWriteCounter(t *testing.T) *writeCounter {
	t.Helper()
	w := &writeCounter{raw: newClient(t), writes: map[string]int{}}
	w.store = KubeStore{Client: interceptor.NewClient(w.raw, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.writes["Create"]++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.writes["Update"]++
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.writes["Patch"]++
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.writes["Delete"]++
			return c.Delete(ctx, obj, opts...)
		},
	})}
	return w
}

// stored reads the reservation as the API server holds it.
func (w *writeCounter) stored(t *testing.T, name string) *v1alpha1.IPReservation {
	t.Helper()
	got := &v1alpha1.IPReservation{}
	if err := w.raw.Get(context.Background(), client.ObjectKey{Name: name}, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// claimReservation is a claim's reservation as the API server returns it
// (with its resourceVersion), and lent to receiver when lent is set.
func claimReservation(t *testing.T, w *writeCounter, lent bool) *v1alpha1.IPReservation {
	t.Helper()
	r := New(Params{Pool: "blue", Key: "blue", Network: "blue", IP: netip.MustParseAddr("10.0.0.9"), Owner: claim, Block: ClaimsBlock})
	if lent {
		r.Spec.LentTo = &receiver
	}
	if err := w.raw.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return w.stored(t, r.Name)
}

// A handoverStep is one of Lend, Unlend and PassToBorrower, on a
// reservation lent (to receiver) or not when it is read.
type handoverStep struct {
	name string
	lent bool
	step func(context.Context, KubeStore, *v1alpha1.IPReservation) error
}

// Lend, Unlend and PassToBorrower each write once, an update through
// KubeStore at the version read; the caller's copy is then what the API
// server holds, at its new version. Unlend and PassToBorrower of a
// reservation lent to nobody write nothing.
func TestLendWritesThroughTheStore(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		handoverStep
		wantOwner v1alpha1.ReservationOwner
		wantLent  *v1alpha1.ReservationOwner
		updates   int
	}{
		{handoverStep{"lend", false, lendStep}, claim, &receiver, 1},
		{handoverStep{"unlend", true, Unlend}, claim, nil, 1},
		{handoverStep{"pass to the borrower", true, PassToBorrower}, receiver, nil, 1},
		{handoverStep{"unlend, lent to nobody", false, Unlend}, claim, nil, 0},
		{handoverStep{"pass, lent to nobody", false, PassToBorrower}, claim, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWriteCounter(t)
			res := claimReservation(t, w, tt.lent)
			before := res.ResourceVersion
			if err := tt.step(ctx, w.store, res); err != nil {
				t.Fatal(err)
			}
			if len(w.writes) > 1 || w.writes["Update"] != tt.updates {
				t.Errorf("writes %v, want %d Update and nothing else", w.writes, tt.updates)
			}
			got := w.stored(t, res.Name)
			if got.Spec.Owner != tt.wantOwner || !sameOwner(got.Spec.LentTo, tt.wantLent) {
				t.Errorf("stored owner %+v lentTo %+v, want %+v, %+v", got.Spec.Owner, got.Spec.LentTo, tt.wantOwner, tt.wantLent)
			}
			if res.ResourceVersion != got.ResourceVersion || res.Spec.Owner != got.Spec.Owner || !sameOwner(res.Spec.LentTo, got.Spec.LentTo) {
				t.Errorf("caller's copy at %s (owner %+v, lentTo %+v), stored at %s: want them the same", res.ResourceVersion, res.Spec.Owner, res.Spec.LentTo, got.ResourceVersion)
			}
			if changed := got.ResourceVersion != before; changed != (tt.updates > 0) {
				t.Errorf("resourceVersion %s -> %s, want a new one only after a write", before, got.ResourceVersion)
			}
		})
	}
}

// A reservation changed or gone since it was read is not written: each
// step's error wraps ErrChanged, and the caller's copy is left as read.
func TestLendOfAChangedReservation(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []handoverStep{
		{"lend", false, lendStep},
		{"unlend", true, Unlend},
		{"pass to the borrower", true, PassToBorrower},
	} {
		t.Run(tt.name+", changed", func(t *testing.T) {
			w := newWriteCounter(t)
			res := claimReservation(t, w, tt.lent)
			read := res.DeepCopy()
			// Another writer's update since res was read.
			newer := res.DeepCopy()
			newer.Spec.LentTo = &v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAMClaim, Namespace: "third", Name: "vm2.blue", UID: "third-uid"}
			if err := w.raw.Update(ctx, newer); err != nil {
				t.Fatal(err)
			}
			if err := tt.step(ctx, w.store, res); !errors.Is(err, ErrChanged) {
				t.Fatalf("got %v, want an error wrapping ErrChanged", err)
			}
			if got := w.stored(t, res.Name); got.ResourceVersion != newer.ResourceVersion || !sameOwner(got.Spec.LentTo, newer.Spec.LentTo) || got.Spec.Owner != claim {
				t.Errorf("stored at %s owner %+v lentTo %+v: the other writer's version was overwritten", got.ResourceVersion, got.Spec.Owner, got.Spec.LentTo)
			}
			if res.ResourceVersion != read.ResourceVersion || !sameOwner(res.Spec.LentTo, read.Spec.LentTo) || res.Spec.Owner != read.Spec.Owner {
				t.Errorf("caller's copy changed by a failed write: %+v, read %+v", res.Spec, read.Spec)
			}
		})
		t.Run(tt.name+", gone", func(t *testing.T) {
			w := newWriteCounter(t)
			res := claimReservation(t, w, tt.lent)
			if err := w.raw.Delete(ctx, res.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			if err := tt.step(ctx, w.store, res); !errors.Is(err, ErrChanged) {
				t.Fatalf("got %v, want an error wrapping ErrChanged", err)
			}
		})
	}
}

// lendStep lends to receiver, in the shape of Unlend and PassToBorrower.
func lendStep(ctx context.Context, s KubeStore, r *v1alpha1.IPReservation) error {
	return Lend(ctx, s, r, receiver)
}

func sameOwner(a, b *v1alpha1.ReservationOwner) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
