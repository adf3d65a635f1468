package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-o", dir+string(os.PathSeparator), "./cmd/ipkeeper", "./cmd/ipkeeper-agent", "./cmd/ipkeeper-controller")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/...: %w\n%s", err, out)
	}
	return &Binaries{Shim: filepath.Join(dir, "ipkeeper"), Agent: filepath.Join(dir, "ipkeeper-agent"), Controller: filepath.Join(dir, "ipkeeper-controller")}, nil
}
