// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// PluginName is the CNI plugin's file name, the value of ipam.type.
const PluginName = ipamconfig.PluginType

// installPlugin copies src into dir/ipkeeper atomically (write a temporary
// file, then rename), so a runtime exec'ing the plugin meanwhile never sees
// a half-written binary.
func installPlugin(src, dir string) (string, error) {
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("locating the CNI plugin to install: %w", err)
		}
		src = filepath.Join(filepath.Dir(exe), PluginName)
	}
	in, err := os.Open(src) //nolint:gosec // an operator-chosen path, by design
	if err != nil {
		return "", fmt.Errorf("opening the CNI plugin to install (--cni-plugin-source): %w", err)
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // CNI bin dirs are world-readable by convention
		return "", fmt.Errorf("creating CNI bin dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+PluginName+".tmp-")
	if err != nil {
		return "", fmt.Errorf("installing the CNI plugin into %s: %w", dir, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("copying the CNI plugin to %s: %w", dir, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("making the CNI plugin executable: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing the CNI plugin: %w", err)
	}
	dst := filepath.Join(dir, PluginName)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("installing the CNI plugin as %s: %w", dst, err)
	}
	return dst, nil
}
