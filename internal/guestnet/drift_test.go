// SPDX-License-Identifier: Apache-2.0

package guestnet

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The gauge counts the claims whose guest differs now, each once.
func TestDriftGauge(t *testing.T) {
	r := &DriftReconciler{}
	a, b := types.NamespacedName{Namespace: "vms", Name: "vm1.blue"}, types.NamespacedName{Namespace: "vms", Name: "vm2.blue"}
	for _, step := range []struct {
		key     types.NamespacedName
		differs bool
		want    float64
	}{{a, true, 1}, {a, true, 1}, {b, true, 2}, {a, false, 1}, {b, false, 0}} {
		r.count(step.key, step.differs)
		if got := testutil.ToFloat64(driftGauge); got != step.want {
			t.Fatalf("after %v differs=%t: gauge %v, want %v", step.key, step.differs, got, step.want)
		}
	}
}

func TestCompare(t *testing.T) {
	held := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	for _, tc := range []struct {
		name     string
		reported []string
		status   metav1.ConditionStatus
		has      []string
	}{
		{"the claim's, with the guest's own link-local address", []string{"10.0.0.5", "fd00::5", "fe80::858:aff:fe00:5"}, metav1.ConditionTrue, []string{"eth1 uses the claim's addresses"}},
		{"CIDR form, as some agents report", []string{"10.0.0.5/24", "fd00::5/64"}, metav1.ConditionTrue, nil},
		{"one of its own besides", []string{"10.0.0.5", "fd00::5", "10.0.0.99"}, metav1.ConditionFalse, []string{"uses 10.0.0.99, which ipkeeper did not give it"}},
		{"IPv6 missing", []string{"10.0.0.5"}, metav1.ConditionFalse, []string{"lacks fd00::5, which ipkeeper gave it"}},
		{"another address instead", []string{"10.0.0.7", "fd00::5"}, metav1.ConditionFalse, []string{"uses 10.0.0.7", "and lacks 10.0.0.5"}},
		{"nothing reported", nil, metav1.ConditionFalse, []string{"lacks 10.0.0.5, fd00::5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(held, tc.reported, "eth1")
			if c.Type != ConditionGuestAddresses || c.Status != tc.status {
				t.Fatalf("%s=%s (%s), want %s", c.Type, c.Status, c.Message, tc.status)
			}
			if (c.Status == metav1.ConditionTrue) != (c.Reason == ReasonGuestUsesItsAddresses) {
				t.Errorf("reason %s for status %s", c.Reason, c.Status)
			}
			for _, h := range tc.has {
				if !strings.Contains(c.Message, h) {
					t.Errorf("message %q lacks %q", c.Message, h)
				}
			}
		})
	}
}
