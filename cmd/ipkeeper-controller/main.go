// SPDX-License-Identifier: Apache-2.0

// Command ipkeeper-controller runs the cluster-wide half of ipkeeper: the
// IPAMClaim controllers for KubeVirt VMs, the virt-launcher pod webhook and
// the reservation garbage collector.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/controllermanager"
	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/version"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	var (
		o           controllermanager.Options
		kubeconfig  string
		logLevel    string
		showVersion bool
	)
	fs := flag.NewFlagSet("ipkeeper-controller", flag.ContinueOnError)
	o.AddFlags(fs)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if showVersion {
		fmt.Println(version.Version)
		return 0
	}
	log, err := logging.New(os.Stderr, logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctrllog.SetLogger(log)

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		log.Error(err, "loading kubeconfig")
		return 1
	}
	cfg.UserAgent = "ipkeeper-controller/" + version.Version
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("ipkeeper-controller starting", "version", version.Version, "namespace", o.Namespace, "webhook", o.EnableWebhook, "certMode", o.CertMode)
	if err := controllermanager.Run(ctx, cfg, o); err != nil {
		log.Error(err, "controller stopped")
		return 1
	}
	return 0
}
