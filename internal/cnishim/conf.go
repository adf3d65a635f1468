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

// socketPath picks the agent socket: ipam.socketPath, then the
// environment, then the default. Relative paths are rejected because they
// would depend on the runtime's working directory.
func (c *netConf) socketPath(getenv func(string) string) (string, error) {
	path, source := c.IPAM.SocketPath, "ipam.socketPath"
	if path == "" {
		path, source = getenv(cniproto.SocketPathEnv), cniproto.SocketPathEnv
	}
	if path == "" {
		return cniproto.DefaultSocketPath, nil
	}
	if !filepath.IsAbs(path) {
		return "", types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("ipkeeper: %s %q must be an absolute path", source, path), "")
	}
	return path, nil
}
