// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipkeeper/ipkeeper/internal/controller/backlog"
)

var fills = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "ipkeeper_controller_claims_filled_total",
	Help: "IPAMClaims whose first addresses ipkeeper-controller recorded in status.ips.",
})

// unfilledMetrics reads the claims each running Reconciler found waiting:
// a claim is normally filled within a second, so one that waits long is
// refused (exhausted, taken, misconfigured) or not looked at.
var unfilledMetrics = backlog.New(
	"ipkeeper_controller_claims_unfilled",
	"IPAMClaims of networks ipkeeper serves that have no addresses in status.ips yet (exported by the leader; 0 on the other replicas).",
	"ipkeeper_controller_claims_oldest_unfilled_seconds",
	"Age (since creation) of the oldest IPAMClaim of a network ipkeeper serves that has no addresses in status.ips yet; 0 when none waits.",
)

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{fills, unfilledMetrics}
}
