// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Values of the state label of ipkeeper_controller_pool_addresses.
const (
	stateTotal       = "total"
	stateUsed        = "used"
	stateFree        = "free"
	stateOutOfRange  = "out_of_range"
	stateCoolingDown = "cooling_down"
)

var poolAddresses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_pool_addresses",
	Help: "Addresses of an IPPool by state: total (what the ranges can hand out), used (held inside the ranges, " +
		"cooling down included), free (total minus used), out_of_range (held where no range hands out any more) " +
		"and cooling_down (released, waiting out spec.reuseCooldown). total and free of large IPv6 ranges exceed " +
		"float64 precision (53 bits) and are approximate; the IPPool status has them exactly.",
}, []string{"pool", "state"})

// poolCondition is what alerts read: the conditions judge each IP family
// against the pool's own warning threshold, which the address counts,
// summed over families, cannot tell (a dual-stack pool whose IPv4 half is
// full still has free addresses).
var poolCondition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_pool_condition",
	Help: "1 when the IPPool's status condition is True, else 0 (False or Unknown), by condition: Ready, Exhausted " +
		"(an IP family has no free address), NearlyExhausted (an IP family's usage is at or above spec.warningThresholdPercent) and GatewayInUse.",
}, []string{"pool", "condition"})

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{poolAddresses, poolCondition}
}

// setMetrics publishes st as pool's ipkeeper_controller_pool_addresses and
// ipkeeper_controller_pool_condition series.
func setMetrics(pool string, st *v1alpha1.IPPoolStatus) {
	poolAddresses.WithLabelValues(pool, stateTotal).Set(decimal(st.Size))
	poolAddresses.WithLabelValues(pool, stateUsed).Set(float64(st.Used))
	poolAddresses.WithLabelValues(pool, stateFree).Set(decimal(st.Free))
	poolAddresses.WithLabelValues(pool, stateOutOfRange).Set(float64(st.OutOfRange))
	poolAddresses.WithLabelValues(pool, stateCoolingDown).Set(float64(st.CoolingDown))
	for _, c := range st.Conditions {
		v := 0.0
		if c.Status == metav1.ConditionTrue {
			v = 1
		}
		poolCondition.WithLabelValues(pool, c.Type).Set(v)
	}
}

// deleteMetrics drops a deleted pool's series.
func deleteMetrics(pool string) {
	poolAddresses.DeletePartialMatch(prometheus.Labels{"pool": pool})
	poolCondition.DeletePartialMatch(prometheus.Labels{"pool": pool})
}

// decimal converts a status count (a decimal string, possibly above 2^64)
// to the nearest float64.
func decimal(s string) float64 {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return 0
	}
	f, _ := new(big.Float).SetInt(n).Float64()
	return f
}
