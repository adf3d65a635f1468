// SPDX-License-Identifier: Apache-2.0

// Command kubectl-ipkeeper is the kubectl plugin (`kubectl ipkeeper ...`):
// who-has, why, pools, leaks, import whereabouts and completion. The
// commands live in package cli; main only wires the signals and streams.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ipkeeper/ipkeeper/internal/cli"
)

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, os.Args[1:], cli.Streams{Out: os.Stdout, Err: os.Stderr})
}
