// SPDX-License-Identifier: Apache-2.0

// Command ipkeeper-agent runs on every node (DaemonSet): it installs the
// ipkeeper CNI plugin into the host's CNI bin dir and serves its requests
// on a root-only unix socket, allocating addresses cluster-wide.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/agent"
	"github.com/ipkeeper/ipkeeper/internal/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/version"
)

type options struct {
	kubeconfig  string
	apiQPS      float64
	apiBurst    int
	agent       agent.Options
	logLevel    string
	showVersion bool
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	// client-go's default (5 qps) would cap a node at a few pod starts per second.
	fs.Float64Var(&o.apiQPS, "kube-api-qps", 100, "API requests per second this agent may send (sustained)")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 200, "API requests this agent may send in a burst")
	fs.StringVar(&o.agent.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, set from the downward API)")
	fs.StringVar(&o.agent.SocketPath, "socket", cniproto.DefaultSocketPath, "unix socket the CNI plugin talks to (created root-only)")
	fs.StringVar(&o.agent.CNIBinDir, "cni-bin-dir", "", "install the ipkeeper CNI plugin into this directory on start (e.g. /host/opt/cni/bin); empty: do not install")
	fs.StringVar(&o.agent.PluginSource, "cni-plugin-source", "", "CNI plugin binary to install (default: 'ipkeeper' next to this binary)")
	fs.StringVar(&o.agent.MetricsAddr, "metrics-bind-address", ":9910", "address for Prometheus /metrics; empty disables")
	fs.StringVar(&o.agent.ProbeAddr, "health-probe-bind-address", ":9911", "address for /healthz and /readyz; empty disables")
	fs.DurationVar(&o.agent.ClaimWaitTimeout, "claim-wait-timeout", 30*time.Second, "how long an ADD waits for the IPAMClaim it references to exist and have addresses (ipkeeper-controller records them)")
	fs.DurationVar(&o.agent.PoolWaitTimeout, "pool-wait-timeout", 10*time.Second, "how long an ADD of an inline network waits for ipkeeper-controller to make the network's IPPool from its NAD")
	fs.DurationVar(&o.agent.CNIGCMinAge, "cni-gc-min-age", time.Minute, "a CNI GC spares reservations attached (spec.attachedAt) less than this long ago (the runtime's list of valid attachments may predate them); negative: none")
	fs.IntVar(&o.agent.MultusDefaultNetworks, "multus-default-networks", -1,
		"number of Multus defaultNetworks (Multus config), to tell which networks annotation element an interface named net<N> by position is; -1: unknown (such attachments then need \"interface\" set, or a NAD network unique in the annotation)")
	fs.Func("multus-system-namespaces", "comma-separated Multus systemNamespaces, whose pods get no default networks (default kube-system)", func(s string) error {
		o.agent.MultusSystemNamespaces = strings.Split(s, ",")
		return nil
	})
	fs.StringVar(&o.agent.WebhookConfigurationName, "webhook-configuration-name", "ipkeeper",
		"ipkeeper's MutatingWebhookConfiguration (as ipkeeper-controller's flag): while it has rules, a virt-launcher interface of a persistent-IP network without an IPAMClaim reference is refused (code 11); empty: no check")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	var o options
	fs := flag.NewFlagSet("ipkeeper-agent", flag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.showVersion {
		fmt.Println(version.Version)
		return 0
	}
	log, err := logging.New(os.Stderr, o.logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctrllog.SetLogger(log)
	o.agent.Logger = log

	if err := streamFirstLists(); err != nil {
		log.Error(err, "enabling streamed lists")
		return 1
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		log.Error(err, "loading kubeconfig")
		return 1
	}
	cfg.QPS, cfg.Burst = float32(o.apiQPS), o.apiBurst
	cfg.UserAgent = "ipkeeper-agent/" + version.Version + " (" + o.agent.NodeName + ")"
	// The Go runtime's and the process's own figures (heap, RSS, CPU) next
	// to the agent's, as every Kubernetes component exports them.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.agent.Registry = reg
	a, err := agent.New(cfg, o.agent)
	if err != nil {
		log.Error(err, "starting")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("ipkeeper-agent starting", "version", version.Version, "node", o.agent.NodeName)
	if err := a.Run(ctx); err != nil {
		log.Error(err, "agent stopped")
		return 1
	}
	return 0
}

// streamFirstLists turns on client-go's WatchListClient: the agent's
// reflectors and informers get their first list (and every relist) as a
// stream of watch events, each trimmed as it arrives, instead of one list
// response of the whole cluster held whole while it is decoded; at 50,000
// reservations that response was the agent's peak memory. Where the API
// server does not stream lists (its WatchList gate is off), the reflector
// falls back to a list. KUBE_FEATURE_WatchListClient=false turns it off.
func streamFirstLists() error {
	if v, ok := os.LookupEnv("KUBE_FEATURE_WatchListClient"); ok && v != "true" {
		return nil
	}
	g, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		return fmt.Errorf("client-go's feature gates cannot be set")
	}
	return g.Set(clientfeatures.WatchListClient, true)
}
