// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipkeeper/ipkeeper/internal/controller/blockgc"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/poolstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationgc"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	podwebhook "github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
)

// collectors are the metrics of ipkeeper-controller, by the package that
// updates them.
func collectors() map[string][]prometheus.Collector {
	return map[string][]prometheus.Collector{
		"blockgc":       blockgc.Collectors(),
		"claimaddrs":    claimaddrs.Collectors(),
		"claimalloc":    claimalloc.Collectors(),
		"claimmaker":    claimmaker.Collectors(),
		"claims":        claims.Collectors(),
		"manager":       {kubeVirtSupportGauge, clusterAPISupportGauge},
		"reservationgc": reservationgc.Collectors(),
		"guestnet":      guestnet.Collectors(),
		"poolstatus":    poolstatus.Collectors(),
		"webhook":       podwebhook.Collectors(),
	}
}

// RegisterMetrics registers ipkeeper-controller's metrics on reg; New
// does it on controller-runtime's registry, which the manager serves.
//
// The collectors are package-level, one per process, and New runs more
// than once per process (tests; never the binary), so registering the
// same collectors again is a no-op. A different collector of a name
// already registered is an error.
func RegisterMetrics(reg prometheus.Registerer) error {
	for pkg, cs := range collectors() {
		for _, c := range cs {
			err := reg.Register(c)
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) && dup.ExistingCollector == c {
				continue
			}
			if err != nil {
				return fmt.Errorf("registering the metrics of package %s: %w", pkg, err)
			}
		}
	}
	return nil
}
