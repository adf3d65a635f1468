// SPDX-License-Identifier: Apache-2.0

package gc

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	released = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ipkeeper_gc_released_reservations_total",
		Help: "IPReservations the garbage collector released (deleted, or retired in a pool with a reuse cooldown), by owner kind (Pod, IPAMClaim or IPAddressClaim).",
	}, []string{"owner_kind"})
	expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_gc_expired_reservations_total",
		Help: "Released IPReservations the garbage collector deleted once their pool's reuse cooldown was over.",
	})
	liveChecks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_gc_live_checks_total",
		Help: "Live API reads made to confirm that a reservation's owner is gone.",
	})
	pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ipkeeper_gc_pending_reservations",
		Help: "Pods confirmed gone whose reservations wait for the grace period to end.",
	})
)

func init() {
	metrics.Registry.MustRegister(released, expired, liveChecks, pending)
}
