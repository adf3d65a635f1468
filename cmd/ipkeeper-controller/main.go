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

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/version"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	var c manager.CommandOptions
	fs := c.FlagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if c.ShowVersion {
		fmt.Println(version.Version)
		return 0
	}
	log, err := logging.New(os.Stderr, c.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctrllog.SetLogger(log)

	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		log.Error(err, "loading kubeconfig")
		return 1
	}
	cfg.UserAgent = "ipkeeper-controller/" + version.Version
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("ipkeeper-controller starting", "version", version.Version, "namespace", c.Namespace, "webhook", c.EnableWebhook, "certMode", c.CertMode)
	if err := manager.Run(ctx, cfg, c.Options); err != nil {
		log.Error(err, "controller stopped")
		return 1
	}
	return 0
}
