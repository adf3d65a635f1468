// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/logging"
)

// notedKeys is what noteIgnoredKeys last logged of a network.
type notedKeys struct{ ignored, unknown string }

// noteIgnoredKeys logs the ipam keys a network's configuration sets that
// do nothing here: whereabouts' own (ipamconfig's Config.IgnoredKeys) and
// those nobody reads, with the key each is closest to (UnknownKeys), once
// per network and again only when they change, so nobody believes they
// act. A misspelt key that would hand out a gateway or an exclude never
// gets here: ipamconfig.Parse refuses it, and the ADD fails with code 7.
func (a *Agent) noteIgnoredKeys(cfg *ipamconfig.Config) {
	unknown := cfg.UnknownKeyList()
	now := notedKeys{ignored: strings.Join(cfg.IgnoredKeys, ","), unknown: strings.Join(unknown, ",")}
	prev, _ := a.ignoredNoted.Swap(cfg.Name, now)
	before, _ := prev.(notedKeys)
	if now.ignored != "" && now.ignored != before.ignored {
		a.log.Info("the network's configuration sets whereabouts keys ipkeeper ignores; they have no effect and can be removed",
			"network", cfg.Name, "ignoredKeys", cfg.IgnoredKeys)
	}
	if now.unknown != "" && now.unknown != before.unknown {
		// A warning: unlike whereabouts' keys, these are likely misspelt.
		logging.Warn(a.log, "the network's configuration sets ipam keys ipkeeper does not know; they are ignored: fix or remove them",
			"network", cfg.Name, "unknownKeys", unknown)
	}
}
