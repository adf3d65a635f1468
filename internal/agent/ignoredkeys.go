// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// noteIgnoredKeys logs the whereabouts-only ipam keys a network's
// configuration sets (ipamconfig's Config.IgnoredKeys), once per network
// and again only when they change, so nobody believes they still act.
func (a *Agent) noteIgnoredKeys(cfg *ipamconfig.Config) {
	keys := strings.Join(cfg.IgnoredKeys, ",")
	prev, seen := a.ignoredNoted.Swap(cfg.Name, keys)
	if keys == "" || (seen && prev.(string) == keys) {
		return
	}
	a.log.Info("the network's configuration sets whereabouts keys ipkeeper ignores; they have no effect and can be removed",
		"network", cfg.Name, "ignoredKeys", cfg.IgnoredKeys)
}
