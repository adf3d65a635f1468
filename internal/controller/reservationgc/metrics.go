// SPDX-License-Identifier: Apache-2.0

package reservationgc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipkeeper/ipkeeper/internal/controller/backlog"
)

var (
	released = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ipkeeper_controller_gc_reservations_released_total",
		Help: "IPReservations the garbage collector released (deleted, or retired in a pool with a reuse cooldown), by owner kind (Pod, IPAMClaim or IPAddressClaim).",
	}, []string{"owner_kind"})
	expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_gc_reservations_expired_total",
		Help: "Released IPReservations the garbage collector deleted once their pool's reuse cooldown was over.",
	})
	liveChecks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_gc_live_checks_total",
		Help: "Live API reads made to confirm that a reservation's owner is gone.",
	})
	pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ipkeeper_controller_gc_reservations_pending",
		Help: "Pods confirmed gone whose reservations wait for the grace period to end.",
	})
	// overdue reads each running Reconciler's reservations that are due
	// for release: a release normally follows at once, so one that stays
	// due is failing.
	overdue = backlog.New(
		"ipkeeper_controller_gc_reservations_overdue",
		"IPReservations due for release (owner confirmed gone and its grace period over, or reuse cooldown over) that the garbage collector has not released yet (exported by the leader; 0 on the other replicas).",
		"ipkeeper_controller_gc_reservations_oldest_overdue_seconds",
		"How long the oldest overdue IPReservation has been due for release; 0 when none is.",
	)
)

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{released, expired, liveChecks, pending, overdue}
}
