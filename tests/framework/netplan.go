// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Netplan runs netplan's generator (IPKEEPER_NETPLAN_GENERATE, unpacked by
// hack/tools.sh) on a network config version 2 document, in a scratch root
// directory, and returns the systemd-networkd files it writes, by name:
// what the document means to the reference parser of its format. An
// invalid document is its error, with netplan's message.
func Netplan(ctx context.Context, doc []byte) (map[string]string, error) {
	gen := os.Getenv("IPKEEPER_NETPLAN_GENERATE")
	if gen == "" {
		return nil, fmt.Errorf("IPKEEPER_NETPLAN_GENERATE is not set: run `bash hack/tools.sh netplan` (make tools does) and export what `hack/tools.sh --env` prints")
	}
	root, err := os.MkdirTemp("", "ipkeeper-netplan-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	conf := filepath.Join(root, "etc", "netplan")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return nil, err
	}
	// cloud-init writes what it is given to 50-cloud-init.yaml, mode 0600.
	if err := os.WriteFile(filepath.Join(conf, "50-cloud-init.yaml"), doc, 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gen, "--root-dir", root)
	// The packages' shared library sits next to the generator, unpacked.
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDirs(filepath.Dir(filepath.Dir(filepath.Dir(gen)))))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("netplan generate: %w: %s", err, out)
	}
	files, err := filepath.Glob(filepath.Join(root, "run", "systemd", "network", "*"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out[filepath.Base(f)] = string(b)
	}
	return out, nil
}

// libDirs lists usr's multiarch library directories.
func libDirs(usr string) string {
	dirs, _ := filepath.Glob(filepath.Join(usr, "lib", "*-linux-gnu"))
	s := filepath.Join(usr, "lib")
	for _, d := range dirs {
		s += ":" + d
	}
	return s
}
