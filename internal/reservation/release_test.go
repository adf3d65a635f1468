// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

func TestRelease(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		cooldown *v1alpha1.Duration
		wantGone bool
	}{
		{"no cooldown: deleted", nil, true},
		{"zero cooldown: deleted", &v1alpha1.Duration{}, true},
		{"cooldown: held until reuseAfter", &v1alpha1.Duration{Duration: 30 * time.Second}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: v1alpha1.IPPoolSpec{ReuseCooldown: tt.cooldown}}
			res := &v1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: "blue.10-0-0-5", UID: "r-uid"},
				Spec: v1alpha1.IPReservationSpec{Network: "blue", Pool: "blue", IP: "10.0.0.5",
					Owner: v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: "ns", Name: "m", UID: "u"}},
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool, res).Build()
			ctx := context.Background()
			if err := c.Get(ctx, client.ObjectKeyFromObject(res), res); err != nil {
				t.Fatal(err)
			}
			cooldown, err := PoolCooldown(ctx, c, nil, res.Spec.Pool)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Release(ctx, KubeStore{Client: c}, res, cooldown, now); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.IPReservation
			err = c.Get(ctx, client.ObjectKeyFromObject(res), &got)
			if gone := apierrors.IsNotFound(err); gone != tt.wantGone {
				t.Fatalf("reservation gone: %v (%v), want %v", gone, err, tt.wantGone)
			}
			if !tt.wantGone {
				if want := Decide(tt.cooldown.Duration, now).ReuseAfter; got.Spec.ReuseAfter == nil || !got.Spec.ReuseAfter.Time.Equal(want) {
					t.Fatalf("reuseAfter = %v, want %v", got.Spec.ReuseAfter, want)
				}
				// Releasing again changes nothing.
				if _, err := Release(ctx, KubeStore{Client: c}, &got, cooldown, now.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A reservation that changed since it was read is not released.
func TestReleaseChangedIsNotReleased(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	res := &v1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: "blue.10-0-0-5", UID: "r-uid"},
		Spec: v1alpha1.IPReservationSpec{Network: "blue", Pool: "blue", IP: "10.0.0.5",
			Owner: v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: "ns", Name: "m", UID: "u"}},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(res).Build()
	ctx := context.Background()
	var stale v1alpha1.IPReservation
	if err := c.Get(ctx, client.ObjectKeyFromObject(res), &stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale.DeepCopy()
	fresh.Spec.ContainerID = "changed"
	if err := c.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	for _, cooldown := range []time.Duration{0, time.Minute} {
		if _, err := Release(ctx, KubeStore{Client: c}, stale.DeepCopy(), cooldown, time.Now()); !errors.Is(err, ErrChanged) {
			t.Errorf("cooldown %s: releasing a changed reservation: %v, want ErrChanged", cooldown, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(res), &stale); err != nil || stale.Spec.Released() {
		t.Fatalf("changed reservation released: %v, %+v", err, stale.Spec)
	}
}
