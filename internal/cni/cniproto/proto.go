// SPDX-License-Identifier: Apache-2.0

// Package cniproto is the wire protocol between the ipkeeper CNI shim and
// the ipkeeper-agent node daemon, on a root-only unix socket, and its
// client. Each connection carries one request: a frame (see WriteFrame:
// an 8-byte header with the magic "ipk", the protocol version and the
// body's length) holding a JSON Request, answered by a frame holding a
// JSON Response. Both are bounded by MaxRequestSize and MaxResponseSize.
//
// A Response carries either "result" (ADD only: a CNI 1.1.0 result) or
// "error" (a CNI error object that the shim prints as-is).
//
// The agent (package cniserver) also answers one HTTP/1.1 route on the
// same socket, told apart by the first bytes, so that curl on the node can
// ask whether it is ready:
//
//	GET  /v1/status                -> Response (agent readiness)
//
// The package depends on the standard library and the CNI types only, not
// on net/http: the shim is exec'd for every attachment, and every package
// it links makes it larger and slower to start (cmd/ipkeeper's
// TestNoHeavyDeps checks this).
package cniproto

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

const (
	// DefaultSocketPath is where the agent listens unless configured otherwise.
	DefaultSocketPath = "/run/ipkeeper/agent.sock"
	// SocketPathEnv overrides DefaultSocketPath for the shim. It is the
	// node's setting: a network config's ipam.socketPath is never dialled.
	SocketPathEnv = "IPKEEPER_AGENT_SOCKET"

	// MaxRequestSize bounds an encoded Request. CNI configs are a few KiB;
	// anything near this is a bug or abuse, not a real network config.
	MaxRequestSize = 1 << 20
	// MaxResponseSize bounds what the client reads back from the agent.
	MaxResponseSize = 1 << 20

	// DefaultTimeout bounds a whole client call. Allocation may need a few
	// API-server round trips, but the runtime must not hang forever.
	DefaultTimeout = 60 * time.Second

	// PathStatus is the HTTP route the agent serves besides frames, for
	// curl (see package cniserver).
	PathStatus = "/v1/status"
)

// CNI verbs carried in Request.Command.
const (
	CmdAdd    = "ADD"
	CmdDel    = "DEL"
	CmdCheck  = "CHECK"
	CmdGC     = "GC"
	CmdStatus = "STATUS"
)

// ErrPluginNotAvailable is CNI spec error 50 ("the plugin is not available,
// i.e. cannot service ADD requests"); cni v1.3.0 has no constant for it.
const ErrPluginNotAvailable uint = 50

// Request is one CNI invocation forwarded by the shim. Field names follow
// the CNI_* environment variables; Config is the plugin's stdin.
type Request struct {
	Command     string `json:"command"`               // CNI_COMMAND
	ContainerID string `json:"containerID,omitempty"` // CNI_CONTAINERID
	Netns       string `json:"netns,omitempty"`       // CNI_NETNS
	IfName      string `json:"ifName,omitempty"`      // CNI_IFNAME
	Args        string `json:"args,omitempty"`        // CNI_ARGS, raw; see ParseArgs
	Path        string `json:"path,omitempty"`        // CNI_PATH
	// Config is the network config from stdin. It is embedded as JSON, so
	// insignificant whitespace may be lost in transit; the content is not.
	Config json.RawMessage `json:"config"`
}

// Response is the agent's answer. At most one of Result and Error is set.
type Response struct {
	// Result is the ADD result, a CNI 1.1.0 (types100) result as JSON.
	Result json.RawMessage `json:"result,omitempty"`
	Error  *types.Error    `json:"error,omitempty"`
}

// Validate checks the fields the CNI spec requires for r.Command, so the
// agent's handlers can rely on them. It returns a *types.Error.
func (r *Request) Validate() error {
	type field struct{ name, val string }
	var required []field
	switch r.Command {
	case CmdAdd, CmdCheck:
		required = []field{{"CNI_CONTAINERID", r.ContainerID}, {"CNI_NETNS", r.Netns}, {"CNI_IFNAME", r.IfName}}
	case CmdDel:
		// CNI_NETNS may be empty on DEL: the namespace can already be gone.
		required = []field{{"CNI_CONTAINERID", r.ContainerID}, {"CNI_IFNAME", r.IfName}}
	case CmdGC, CmdStatus:
	default:
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("unknown CNI command %q", r.Command), "")
	}
	for _, f := range required {
		if f.val == "" {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("%s is required for %s", f.name, r.Command), "")
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(r.Config, &obj); err != nil || obj == nil {
		msg := "network config is missing or not a JSON object"
		if err != nil {
			msg = fmt.Sprintf("%s: %v", msg, err)
		}
		return types.NewError(types.ErrDecodingFailure, msg, "")
	}
	return nil
}

// CNIArgs parses r.Args; see ParseArgs.
func (r *Request) CNIArgs() (*CNIArgs, error) {
	return ParseArgs(r.Args)
}
