// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestDecide(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		cooldown time.Duration
		now      time.Time
		want     Decision
	}{
		{"no cooldown: delete", 0, at, Decision{}},
		{"negative cooldown: delete", -time.Second, at, Decision{}},
		{"on a whole second", 30 * time.Second, at, Decision{Retire: true, ReuseAfter: at.Add(30 * time.Second)}},
		// spec.reuseAfter keeps whole seconds: rounding down would cut the
		// cooldown short.
		{"rounded up to the second", 30 * time.Second, at.Add(200 * time.Millisecond), Decision{Retire: true, ReuseAfter: at.Add(31 * time.Second)}},
		{"under a second", 100 * time.Millisecond, at.Add(950 * time.Millisecond), Decision{Retire: true, ReuseAfter: at.Add(2 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.cooldown, tt.now)
			if got.Retire != tt.want.Retire || !got.ReuseAfter.Equal(tt.want.ReuseAfter) {
				t.Fatalf("Decide(%s, %s) = %+v, want %+v", tt.cooldown, tt.now, got, tt.want)
			}
			if got.Retire && got.ReuseAfter.Sub(tt.now) < tt.cooldown {
				t.Errorf("reuseAfter %s is less than the cooldown %s after %s", got.ReuseAfter, tt.cooldown, tt.now)
			}
			// What the API server stores is what was decided.
			stored := metav1.NewTime(got.ReuseAfter)
			b, err := json.Marshal(&stored)
			if err != nil {
				t.Fatal(err)
			}
			var back metav1.Time
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got.Retire && !back.Time.Equal(got.ReuseAfter) {
				t.Errorf("reuseAfter %s is stored as %s", got.ReuseAfter, back.Time)
			}
		})
	}
}

func TestCooldown(t *testing.T) {
	pool := func(d *ipkeeperv1alpha1.Duration) *ipkeeperv1alpha1.IPPool {
		return &ipkeeperv1alpha1.IPPool{Spec: ipkeeperv1alpha1.IPPoolSpec{ReuseCooldown: d}}
	}
	for _, tt := range []struct {
		name string
		pool *ipkeeperv1alpha1.IPPool
		want time.Duration
	}{
		{"pool gone", nil, 0},
		{"unset", pool(nil), 0},
		{"set", pool(&ipkeeperv1alpha1.Duration{Duration: 30 * time.Second}), 30 * time.Second},
		{"negative", pool(&ipkeeperv1alpha1.Duration{Duration: -time.Second}), 0},
		{"invalid", pool(&ipkeeperv1alpha1.Duration{Invalid: "30 seconds"}), 0},
	} {
		if got := Cooldown(tt.pool); got != tt.want {
			t.Errorf("%s: Cooldown = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestLeft(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	spec := &ipkeeperv1alpha1.IPReservationSpec{}
	if _, ok := Left(spec, now); ok {
		t.Errorf("a reservation in use is due for deletion")
	}
	spec.ReuseAfter = &metav1.Time{Time: now.Add(3 * time.Second)}
	if left, ok := Left(spec, now); !ok || left != 3*time.Second {
		t.Errorf("Left = %s, %v; want 3s, true", left, ok)
	}
	if left, ok := Left(spec, now.Add(3*time.Second)); !ok || left > 0 {
		t.Errorf("at reuseAfter: Left = %s, %v; want <= 0 (due), true", left, ok)
	}
}

func TestRetirePatch(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 35, 0, time.UTC)
	p, err := RetirePatch("u1", "42", at)
	if err != nil {
		t.Fatal(err)
	}
	data, err := p.Data(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			ReuseAfter string `json:"reuseAfter"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.UID != "u1" || got.Metadata.ResourceVersion != "42" || got.Spec.ReuseAfter != "2026-01-02T03:04:35Z" {
		t.Errorf("patch %s: want uid u1, resourceVersion 42 (the preconditions) and reuseAfter 2026-01-02T03:04:35Z", data)
	}
	if _, err := RetirePatch("u1", "", at); err == nil {
		t.Errorf("a patch without a resourceVersion would retire whatever version is there; want an error")
	}
}
