// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries are the ipkeeper executables under test, built from the checkout.
type Binaries struct {
	// Shim is the CNI plugin, cmd/ipkeeper.
	Shim string
	// Agent is the node agent, cmd/ipkeeper-agent. Shim is its sibling, which
	// is where the agent finds the plugin it installs.
	Agent string
	// Controller is cmd/ipkeeper-controller.
	Controller string
}

// BuildBinaries builds the three commands of the checkout
// at root into dir with `go build` (not the output of `make build`, which may
// be stale or missing).
func BuildBinaries(ctx context.Context, root, dir string) (*Binaries, error) {
	return build(ctx, root, dir, false)
}

// BuildRaceBinaries is BuildBinaries with the race detector compiled in:
// a data race makes the process print "WARNING: DATA RACE" to its log.
// The shim stays a static binary, as it is shipped.
func BuildRaceBinaries(ctx context.Context, root, dir string) (*Binaries, error) {
	b, err := build(ctx, root, dir, true)
	if err != nil {
		return nil, err
	}
	if _, err := build(ctx, root, dir, false, "./cmd/ipkeeper"); err != nil {
		return nil, err
	}
	return b, nil
}

func build(ctx context.Context, root, dir string, race bool, pkgs ...string) (*Binaries, error) {
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd/ipkeeper", "./cmd/ipkeeper-agent", "./cmd/ipkeeper-controller"}
	}
	args := []string{"build", "-trimpath"}
	cgo := "CGO_ENABLED=0"
	if race {
		args, cgo = append(args, "-race"), "CGO_ENABLED=1" // the race detector needs cgo
	}
	cmd := exec.CommandContext(ctx, "go", append(append(args, "-o", dir+string(os.PathSeparator)), pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	return &Binaries{Shim: filepath.Join(dir, "ipkeeper"), Agent: filepath.Join(dir, "ipkeeper-agent"), Controller: filepath.Join(dir, "ipkeeper-controller")}, nil
}
