// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	creates = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_reservation_creates_total",
		Help: "IPReservations ipkeeper-controller tried to create for claims (IPAMClaims and Cluster API IPAddressClaims).",
	})
	conflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_allocation_conflicts_total",
		Help: "Candidate addresses for claims that turned out held at create time (the controller's cache was behind).",
	})
	takenBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_addresses_taken_back_total",
		Help: "Addresses an IPAMClaim got back that a claim of its namespace and name held before and released, while they cooled down (the VM deleted and made again, or restored).",
	})
	blocksTaken = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_blocks_taken_total",
		Help: "Address blocks (IPBlocks of holder IPAMClaims) ipkeeper-controller took for claims' addresses.",
	})
)

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{creates, conflicts, takenBack, blocksTaken}
}
