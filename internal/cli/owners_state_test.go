// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestReservationState(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	lent := &ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "b", Name: "vm1r.blue", UID: "u"}
	for _, tt := range []struct {
		name string
		spec ipkeeperv1alpha1.IPReservationSpec
		want string
	}{
		{"held", ipkeeperv1alpha1.IPReservationSpec{}, "held"},
		{"lent", ipkeeperv1alpha1.IPReservationSpec{LentTo: lent}, "held, lent to IPAMClaim b/vm1r.blue while a decentralized live migration"},
		{"cooling down", ipkeeperv1alpha1.IPReservationSpec{ReuseAfter: &metav1.Time{Time: now.Add(time.Minute)}}, "released, reusable after 2026-11-27T12:01:00Z (in 1m0s)"},
		{"cooled down", ipkeeperv1alpha1.IPReservationSpec{ReuseAfter: &metav1.Time{Time: now.Add(-time.Minute)}}, "released, cooldown over since"},
	} {
		if got := reservationState(&tt.spec, now); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: %q, want it to begin %q", tt.name, got, tt.want)
		}
	}
}
