// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var fills = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "ipkeeper_controller_claims_filled_total",
	Help: "IPAMClaims whose first addresses ipkeeper-controller recorded in status.ips.",
})

func init() { metrics.Registry.MustRegister(fills) }
