// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"flag"
	"os"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

// CommandOptions are ipkeeper-agent's whole command line: the agent's
// Options and what main uses itself.
type CommandOptions struct {
	Kubeconfig  string
	APIQPS      float64
	APIBurst    int
	Agent       Options
	TLS         tlsconfig.Options
	LogLevel    string
	ShowVersion bool
}

// FlagSet registers every flag of ipkeeper-agent on a new flag set, bound
// to o. main parses the command line with it; the docs check
// (hack/docscheck) lists the flags from it.
func (o *CommandOptions) FlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("ipkeeper-agent", flag.ContinueOnError)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	// client-go's default (5 qps) would cap a node at a few pod starts per second.
	fs.Float64Var(&o.APIQPS, "kube-api-qps", 100, "API requests per second this agent may send (sustained)")
	fs.IntVar(&o.APIBurst, "kube-api-burst", 200, "API requests this agent may send in a burst")
	fs.StringVar(&o.Agent.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, set from the downward API)")
	fs.StringVar(&o.Agent.SocketPath, "socket", cniproto.DefaultSocketPath, "unix socket the CNI plugin talks to (created root-only)")
	fs.StringVar(&o.Agent.CNIBinDir, "cni-bin-dir", "", "install the ipkeeper CNI plugin into this directory on start (e.g. /host/opt/cni/bin); empty: do not install")
	fs.StringVar(&o.Agent.PluginSource, "cni-plugin-source", "", "CNI plugin binary to install (default: 'ipkeeper' next to this binary)")
	fs.StringVar(&o.Agent.MetricsAddr, "metrics-bind-address", ":9910", "address for Prometheus /metrics; empty disables")
	fs.StringVar(&o.Agent.MetricsCertDir, "metrics-cert-dir", "", "serve /metrics over TLS with tls.crt and tls.key from this directory (reloaded when they change), with the --tls-* flags and --enable-http2; empty: plain HTTP")
	o.TLS.AddFlags(fs, "/metrics with --metrics-cert-dir")
	fs.StringVar(&o.Agent.ProfilingAddr, "profiling-bind-address", "", "serve Go's CPU and memory profiles (/debug/pprof/, plain HTTP, unauthenticated) on this address, e.g. 127.0.0.1:9912; empty disables")
	fs.StringVar(&o.Agent.ProbeAddr, "health-probe-bind-address", ":9911", "address for /healthz and /readyz; empty disables")
	fs.DurationVar(&o.Agent.ClaimWaitTimeout, "claim-wait-timeout", 30*time.Second, "how long an ADD waits for the IPAMClaim it references to exist and have addresses (ipkeeper-controller records them)")
	fs.DurationVar(&o.Agent.PoolWaitTimeout, "pool-wait-timeout", 10*time.Second, "how long an ADD of an inline network waits for ipkeeper-controller to make the network's IPPool from its NAD")
	fs.DurationVar(&o.Agent.CNIGCMinAge, "cni-gc-min-age", time.Minute, "a CNI GC spares reservations attached (spec.attachedAt) less than this long ago (the runtime's list of valid attachments may predate them); negative: none")
	fs.IntVar(&o.Agent.MultusDefaultNetworks, "multus-default-networks", -1,
		"number of Multus defaultNetworks (Multus config), to tell which networks annotation element an interface named net<N> by position is; -1: unknown (such attachments then need \"interface\" set, or a NAD network unique in the annotation)")
	fs.Func("multus-system-namespaces", "comma-separated Multus systemNamespaces, whose pods get no default networks (default kube-system)", func(s string) error {
		o.Agent.MultusSystemNamespaces = strings.Split(s, ",")
		return nil
	})
	fs.StringVar(&o.Agent.WebhookConfigurationName, "webhook-configuration-name", "ipkeeper",
		"ipkeeper's MutatingWebhookConfiguration (as ipkeeper-controller's flag): while it has rules, a virt-launcher interface of a persistent-IP network without an IPAMClaim reference is refused (code 11); empty: no check")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.ShowVersion, "version", false, "print the version and exit")
	return fs
}

// Complete checks the flags that can be checked without the cluster and
// fills Agent with what they give (the TLS settings of /metrics); errors
// name the flag and the value.
func (o *CommandOptions) Complete() error {
	s, err := o.TLS.Parse()
	if err != nil {
		return err
	}
	o.Agent.MetricsTLS = s
	return nil
}
