// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
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
	var top map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &top); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("ipkeeper: parsing network config from stdin: %v", err), "")
	}
	var c netConf
	if err := field("cniVersion", top["cniVersion"], &c.CNIVersion); err != nil {
		return nil, err
	}
	if raw, ok := top["ipam"]; ok {
		var ipam map[string]json.RawMessage
		if err := field("ipam", raw, &ipam); err != nil {
			return nil, err
		}
		if err := field("ipam.socketPath", ipam["socketPath"], &c.IPAM.SocketPath); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// field decodes one config field (absent or null: left as it is); a value
// of the wrong JSON type is a configuration error naming the field and
// the value, not a Go type.
func field(name string, raw json.RawMessage, dst any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		want := "a string"
		if _, isMap := dst.(*map[string]json.RawMessage); isMap {
			want = "an object"
		}
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("ipkeeper: %s: expected %s, got JSON %s %s", name, want, jsonKind(raw), raw), "")
	}
	return nil
}

func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	}
	return "number"
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
