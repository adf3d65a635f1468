// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// ipkeeper_controller_pool_condition follows the conditions, per IP family as they
// judge it (a dual-stack pool with its IPv4 half full is exhausted while
// addresses are free), and goes with the pool.
func TestPoolConditionMetric(t *testing.T) {
	pool := poolOf("metrics-test", v1alpha1.PoolRange{Range: "10.0.0.0/29"}, v1alpha1.PoolRange{Range: "fd00::/120"})
	condition := func(typ string) float64 {
		return testutil.ToFloat64(poolCondition.WithLabelValues(pool.Name, typ))
	}
	others := testutil.CollectAndCount(poolCondition) // other tests' pools
	var held []*v1alpha1.IPReservation
	for i := 1; i <= 6; i++ {
		held = append(held, res(pool.Name, "a", fmt.Sprintf("10.0.0.%d", i)))
	}
	for _, tt := range []struct {
		name              string
		held              []*v1alpha1.IPReservation
		exhausted, nearly float64
	}{
		{"empty", nil, 0, 0},
		{"IPv4 full, IPv6 free", held, 1, 1},
		{"one IPv4 address free again", held[1:], 0, 0},
	} {
		st := statusOf(t, pool, tt.held...)
		setMetrics(pool.Name, &st)
		if got := condition(v1alpha1.PoolExhausted); got != tt.exhausted {
			t.Errorf("%s: Exhausted = %v, want %v", tt.name, got, tt.exhausted)
		}
		if got := condition(v1alpha1.PoolNearlyExhausted); got != tt.nearly {
			t.Errorf("%s: NearlyExhausted = %v, want %v", tt.name, got, tt.nearly)
		}
		if got := condition(v1alpha1.PoolReady); got != 1 {
			t.Errorf("%s: Ready = %v, want 1", tt.name, got)
		}
	}
	if n := testutil.CollectAndCount(poolCondition) - others; n != 4 {
		t.Fatalf("%d ipkeeper_controller_pool_condition series of the pool, want one per condition (4)", n)
	}
	deleteMetrics(pool.Name)
	if n := testutil.CollectAndCount(poolCondition) - others; n != 0 {
		t.Errorf("%d ipkeeper_controller_pool_condition series left after the pool went", n)
	}
}
