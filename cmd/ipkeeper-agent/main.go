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
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	"github.com/ipkeeper/ipkeeper/internal/version"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	var o agent.CommandOptions
	fs := o.FlagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.ShowVersion {
		fmt.Println(version.Version)
		return 0
	}
	log, err := logging.New(os.Stderr, o.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := o.Complete(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctrllog.SetLogger(log)
	o.Agent.Logger = log

	if err := streamFirstLists(); err != nil {
		log.Error(err, "enabling streamed lists")
		return 1
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		log.Error(err, "loading kubeconfig")
		return 1
	}
	cfg.QPS, cfg.Burst = float32(o.APIQPS), o.APIBurst
	cfg.UserAgent = "ipkeeper-agent/" + version.Version + " (" + o.Agent.NodeName + ")"
	// The Go runtime's and the process's own figures (heap, RSS, CPU) next
	// to the agent's, as every Kubernetes component exports them.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.Agent.Registry = reg
	a, err := agent.New(cfg, o.Agent)
	if err != nil {
		log.Error(err, "starting")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("ipkeeper-agent starting", "version", version.Version, "node", o.Agent.NodeName)
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
