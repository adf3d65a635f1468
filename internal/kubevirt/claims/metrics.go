// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	claimsCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_created_total",
		Help: "IPAMClaims created for VMs and standalone VMIs.",
	})
	claimsReleased = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_released_total",
		Help: "IPAMClaims released (finalizer removed) once no VMI or launcher pod used them.",
	})
	claimConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_name_conflicts_total",
		Help: "Times a wanted IPAMClaim name was held by another owner (for example a VM deleted and re-created with the same name).",
	})
	nadProblems = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_nad_problems_total",
		Help: "Times a VM's network could not get a claim because its NetworkAttachmentDefinition was missing or invalid.",
	})
	addressesRetained = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_addresses_retained_total",
		Help: "Reservations of released IPAMClaims retired for their VM's retention (ipkeeper.io/retain-addresses-for) instead of being deleted: kept for a claim of the same namespace and name.",
	})
	gateOffWarnings = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ipkeeper_controller_claims_persistent_ips_disabled_total",
		Help: "PersistentIPsDisabled warnings: VMs and standalone VMIs with a network that allows persistent IPs but no IPAMClaim for it, told that the PersistentIPs feature gate is off (once per owner per hour while it stays off).",
	})
)

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{claimsCreated, claimsReleased, claimConflicts, nadProblems, addressesRetained, gateOffWarnings}
}
