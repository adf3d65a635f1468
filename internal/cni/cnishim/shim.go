// SPDX-License-Identifier: Apache-2.0

// Package cnishim implements the ipkeeper CNI plugin binary: a thin shim
// that forwards each CNI invocation to the node's ipkeeper-agent and
// relays its answer. It must stay free of Kubernetes client libraries so
// the binary the runtime execs is small and starts fast.
package cnishim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// VersionInfo lists the CNI spec versions the shim accepts. Results are
// converted down from the agent's 1.1.0 result as needed.
func VersionInfo() version.PluginInfo {
	return version.PluginSupports("0.3.1", "0.4.0", "1.0.0", "1.1.0")
}

// Plugin holds the shim's dependencies; the zero value is the production
// configuration. Tests replace Stdout, Stderr and Getenv.
type Plugin struct {
	Stdout  io.Writer           // where the ADD result goes; os.Stdout if nil
	Stderr  io.Writer           // warnings (the runtime's log); os.Stderr if nil
	Getenv  func(string) string // os.Getenv if nil
	Timeout time.Duration       // per agent call; cniproto.DefaultTimeout if 0
}

// Funcs returns the production plugin's callbacks for skel.PluginMainFuncs.
func Funcs() skel.CNIFuncs { return (&Plugin{}).Funcs() }

// Funcs returns p's callbacks for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, GC: p.GC, Status: p.Status}
}

// Add forwards ADD and prints the agent's result in the config's cniVersion.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, resp, err := p.forward(cniproto.CmdAdd, args)
	if err != nil {
		return err
	}
	if len(resp.Result) == 0 {
		return types.NewError(types.ErrInternal, "ipkeeper-agent returned no result for ADD", "")
	}
	// CreateFromBytes honours the result's own cniVersion, so a future
	// agent answering in a newer version still works.
	res, err := create.CreateFromBytes(resp.Result)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("ipkeeper: decoding agent result: %v", err), "")
	}
	out, err := res.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("ipkeeper: converting result to cniVersion %s: %v", conf.CNIVersion, err), "")
	}
	if err := out.PrintTo(p.stdout()); err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("ipkeeper: writing result: %v", err), "")
	}
	return nil
}

// Del forwards DEL. The agent treats unknown attachments as success. An
// unreachable agent is an error, so the runtime retries and the address is
// released at once when the agent is back, until the agent has been gone
// for AgentGoneAfter: then DEL succeeds with a warning (see AgentGoneAfter).
func (p *Plugin) Del(args *skel.CmdArgs) error {
	_, _, err := p.forward(cniproto.CmdDel, args)
	var gone *agentGoneError
	if errors.As(err, &gone) {
		if ok, since := agentGone(gone.sock, gone.err, time.Now()); ok {
			warnAgentGone(p.stderr(), gone.sock, since, fmt.Sprintf("container %s, interface %s", args.ContainerID, args.IfName))
			return nil
		}
		return toCNIError(cniproto.CmdDel, fmt.Errorf("%w; DEL succeeds without the agent once it has been unreachable for %s", gone.err, AgentGoneAfter))
	}
	return err
}

// agentGoneError carries a transport failure to Del, which may decide the
// agent is gone for good.
type agentGoneError struct {
	sock string
	err  error
}

func (e *agentGoneError) Error() string { return e.err.Error() }

// Check forwards CHECK; prevResult travels inside the config.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	_, _, err := p.forward(cniproto.CmdCheck, args)
	return err
}

// GC forwards GC; cni.dev/valid-attachments travels inside the config.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	_, _, err := p.forward(cniproto.CmdGC, args)
	return err
}

// Status forwards STATUS; an unreachable or not-ready agent yields
// error 50 (plugin not available).
func (p *Plugin) Status(args *skel.CmdArgs) error {
	_, _, err := p.forward(cniproto.CmdStatus, args)
	return err
}

func (p *Plugin) forward(cmd string, args *skel.CmdArgs) (*netConf, *cniproto.Response, error) {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	sock, err := conf.socketPath(p.getenv())
	if err != nil {
		return nil, nil, err
	}
	c := cniproto.Client{SocketPath: sock, Timeout: p.Timeout}
	resp, err := c.Do(context.Background(), cniproto.Request{
		Command:     cmd,
		ContainerID: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Args:        args.Args,
		Path:        args.Path,
		Config:      args.StdinData,
	})
	if err != nil {
		var ue *cniproto.UnavailableError
		switch {
		case cmd == cniproto.CmdDel && errors.As(err, &ue):
			return nil, nil, &agentGoneError{sock: sock, err: err}
		case !errors.As(err, &ue):
			agentAnswered(sock) // it is there, even if it said no
		}
		return nil, nil, toCNIError(cmd, err)
	}
	agentAnswered(sock)
	return conf, resp, nil
}

// toCNIError passes agent CNI errors through untouched and classifies
// transport failures: an agent that is down or too slow is a transient
// condition (11, try again later), and for STATUS it means the plugin is
// not available (50).
func toCNIError(cmd string, err error) error {
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce
	}
	var ue *cniproto.UnavailableError
	if errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded) {
		code := types.ErrTryAgainLater
		if cmd == cniproto.CmdStatus {
			code = cniproto.ErrPluginNotAvailable
		}
		return types.NewError(code, err.Error(), "")
	}
	return types.NewError(types.ErrInternal, err.Error(), "")
}

func (p *Plugin) stdout() io.Writer {
	if p.Stdout == nil {
		return os.Stdout
	}
	return p.Stdout
}

func (p *Plugin) stderr() io.Writer {
	if p.Stderr == nil {
		return os.Stderr
	}
	return p.Stderr
}

func (p *Plugin) getenv() func(string) string {
	if p.Getenv == nil {
		return os.Getenv
	}
	return p.Getenv
}
