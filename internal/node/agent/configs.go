// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"sync"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// maxParsedConfigs bounds the configurations parsedConfigs remembers. A
// node's ADDs carry a few distinct ones (one per network attachment
// definition); past the bound the memory is dropped and built again.
const maxParsedConfigs = 64

// parsedConfigs remembers network configurations parsed from the bytes a
// request carried: ipamconfig.Parse depends only on them, and every ADD
// of a network carries the same ones. Parsing them (JSON, ranges, the
// network name's check) was a fifth of the agent's CPU in an ADD outside
// its create (figure 4's profile). A configuration with a part of its own
// attachment (a static address, a MAC, a claim reference) is parsed each
// time: it would not come again. Errors are not remembered, so a bad
// configuration is reported, field and value, on every request. The
// Configs handed out are shared: callers only read them.
type parsedConfigs struct {
	mu     sync.Mutex
	parsed map[string]*ipamconfig.Config
}

var configs = &parsedConfigs{}

// parse returns ipamconfig.Parse(data), remembered.
func (p *parsedConfigs) parse(data []byte) (*ipamconfig.Config, error) {
	p.mu.Lock()
	cfg, ok := p.parsed[string(data)]
	p.mu.Unlock()
	if ok {
		return cfg, nil
	}
	cfg, err := ipamconfig.Parse(data)
	if err != nil || len(cfg.StaticIPs) > 0 || cfg.RuntimeMAC != nil || cfg.ClaimReference != "" {
		return cfg, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parsed == nil || len(p.parsed) >= maxParsedConfigs {
		p.parsed = make(map[string]*ipamconfig.Config, maxParsedConfigs)
	}
	p.parsed[string(data)] = cfg
	return cfg, nil
}

// len is how many configurations are remembered.
func (p *parsedConfigs) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parsed)
}
