// SPDX-License-Identifier: Apache-2.0

// Command ipkeeper is the CNI IPAM plugin exec'd by the container runtime
// (usually via Multus and a bridge/macvlan/ipvlan plugin). It only forwards
// requests to the node's ipkeeper-agent; see package cnishim.
package main

import (
	"github.com/ipkeeper/ipkeeper/internal/cni/cnishim"
)

// version is set at build time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/ipkeeper
var version = "dev"

func main() {
	cnishim.Main("ipkeeper CNI IPAM plugin " + version)
}
