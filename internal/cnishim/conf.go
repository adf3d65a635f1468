// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cniproto"
)

// netConf is the little the shim needs from stdin; the agent validates
// the rest, so the shim never has to change when the config grows.
type netConf struct {
	CNIVersion string `json:"cniVersion"`
	IPAM       struct {
		SocketPath string `json:"socketPath"`
	} `json:"ipam"`
}

func parseConf(stdin []byte) (*netConf, error) {
	var c netConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("ipkeeper: parsing network config from stdin: %v", err), "")
	}
	return &c, nil
}

// socketPath picks the agent socket from the node only: the environment
// the runtime gives the plugin, else the default. The network definition is
// written by namespace users with NAD rights, so the root shim never dials
// or creates files at a path it names: an ipam.socketPath other than the
// node's is a configuration error. Relative paths are rejected because
// they would depend on the runtime's working directory.
func (c *netConf) socketPath(getenv func(string) string) (string, error) {
	path := getenv(cniproto.SocketPathEnv)
	if path == "" {
		path = cniproto.DefaultSocketPath
	}
	if !filepath.IsAbs(path) {
		return "", types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("ipkeeper: %s %q must be an absolute path", cniproto.SocketPathEnv, path), "")
	}
	if c.IPAM.SocketPath != "" && filepath.Clean(c.IPAM.SocketPath) != filepath.Clean(path) {
		return "", types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("ipkeeper: ipam.socketPath %q is not this node's agent socket %q: the socket is the node's (%s on the runtime, --socket on the agent); remove ipam.socketPath from the network",
				c.IPAM.SocketPath, path, cniproto.SocketPathEnv), "")
	}
	return path, nil
}
