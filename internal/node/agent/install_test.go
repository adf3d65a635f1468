// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path string, content []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, mode); err != nil {
		t.Fatal(err)
	}
}

// dirNames lists dir, or returns nil when it is not a directory.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestInstallPlugin(t *testing.T) {
	binary := bytes.Repeat([]byte("\x7fELF new plugin "), 64<<10) // 1 MiB, several copy buffers
	tests := []struct {
		name string
		// setup prepares the temp dir root and returns the source and CNI bin dir.
		setup      func(t *testing.T, root string) (src, dir string)
		wantErr    string // substring; empty means success
		wantFiles  []string
		wantNoDest bool
	}{
		{
			name: "into an existing empty dir",
			setup: func(t *testing.T, root string) (string, string) {
				writeFile(t, filepath.Join(root, "src", "ipkeeper"), binary, 0o600)
				dir := filepath.Join(root, "bin")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(root, "src", "ipkeeper"), dir
			},
			wantFiles: []string{"ipkeeper"},
		},
		{
			name: "creates the dir",
			setup: func(t *testing.T, root string) (string, string) {
				writeFile(t, filepath.Join(root, "src", "plugin"), binary, 0o644)
				return filepath.Join(root, "src", "plugin"), filepath.Join(root, "opt", "cni", "bin")
			},
			wantFiles: []string{"ipkeeper"},
		},
		{
			name: "overwrites an existing binary and keeps other plugins",
			setup: func(t *testing.T, root string) (string, string) {
				writeFile(t, filepath.Join(root, "src", "ipkeeper"), binary, 0o700)
				dir := filepath.Join(root, "bin")
				writeFile(t, filepath.Join(dir, "ipkeeper"), []byte("old plugin, longer than nothing"), 0o555)
				writeFile(t, filepath.Join(dir, "bridge"), []byte("bridge"), 0o755)
				return filepath.Join(root, "src", "ipkeeper"), dir
			},
			wantFiles: []string{"bridge", "ipkeeper"},
		},
		{
			name: "empty source",
			setup: func(t *testing.T, root string) (string, string) {
				writeFile(t, filepath.Join(root, "src", "ipkeeper"), nil, 0o755)
				return filepath.Join(root, "src", "ipkeeper"), filepath.Join(root, "bin")
			},
			wantFiles: []string{"ipkeeper"},
		},
		{
			name: "missing source",
			setup: func(_ *testing.T, root string) (string, string) {
				return filepath.Join(root, "nope", "ipkeeper"), filepath.Join(root, "bin")
			},
			wantErr:    "--cni-plugin-source",
			wantNoDest: true,
		},
		{
			name: "missing source leaves an installed binary alone",
			setup: func(t *testing.T, root string) (string, string) {
				dir := filepath.Join(root, "bin")
				writeFile(t, filepath.Join(dir, "ipkeeper"), []byte("old plugin"), 0o755)
				return filepath.Join(root, "nope", "ipkeeper"), dir
			},
			wantErr:   "--cni-plugin-source",
			wantFiles: []string{"ipkeeper"},
		},
		{
			name: "source is a directory: no temporary file left",
			setup: func(t *testing.T, root string) (string, string) {
				src := filepath.Join(root, "src")
				if err := os.Mkdir(src, 0o755); err != nil {
					t.Fatal(err)
				}
				return src, filepath.Join(root, "bin")
			},
			wantErr:    "copying the CNI plugin",
			wantNoDest: true,
		},
		{
			name: "dir is a file",
			setup: func(t *testing.T, root string) (string, string) {
				writeFile(t, filepath.Join(root, "src", "ipkeeper"), binary, 0o755)
				writeFile(t, filepath.Join(root, "bin"), []byte("not a dir"), 0o644)
				return filepath.Join(root, "src", "ipkeeper"), filepath.Join(root, "bin")
			},
			wantErr:    "creating CNI bin dir",
			wantNoDest: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			src, dir := tt.setup(t, root)
			before, _ := os.ReadFile(filepath.Join(dir, PluginName))
			wantContent, _ := os.ReadFile(src)

			dst, err := installPlugin(src, dir)

			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("installPlugin error = %v, want one mentioning %q", err, tt.wantErr)
				}
				wantContent = before // an installed binary is untouched
			} else {
				if err != nil {
					t.Fatalf("installPlugin: %v", err)
				}
				if want := filepath.Join(dir, PluginName); dst != want {
					t.Errorf("installed at %q, want %q", dst, want)
				}
			}
			if names := dirNames(t, dir); strings.Join(names, ",") != strings.Join(tt.wantFiles, ",") {
				t.Errorf("%s holds %q, want %q (temporary files must not be left behind)", dir, names, tt.wantFiles)
			}
			dstPath := filepath.Join(dir, PluginName)
			fi, statErr := os.Stat(dstPath)
			if tt.wantNoDest {
				if statErr == nil {
					t.Errorf("%s exists after a failed install", dstPath)
				}
				return
			}
			if statErr != nil {
				t.Fatal(statErr)
			}
			got, err := os.ReadFile(dstPath)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, wantContent) {
				t.Errorf("%s holds %d bytes, want the %d bytes of %s", dstPath, len(got), len(wantContent), src)
			}
			if tt.wantErr == "" && (!fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755) {
				t.Errorf("%s mode = %v, want a regular file with 0755", dstPath, fi.Mode())
			}
		})
	}
}

// Replacing by rename means a runtime that has the old binary open (or is
// exec'ing it) keeps reading the old file to its end; writing in place
// would hand it a mix of both.
func TestInstallPluginReplacesAtomically(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "bin")
	old := bytes.Repeat([]byte("old "), 4096)
	writeFile(t, filepath.Join(dir, PluginName), old, 0o755)
	src := filepath.Join(root, "new")
	writeFile(t, src, bytes.Repeat([]byte("NEW "), 8192), 0o755)

	f, err := os.Open(filepath.Join(dir, PluginName))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	head := make([]byte, 8)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}

	if _, err := installPlugin(src, dir); err != nil {
		t.Fatalf("installPlugin: %v", err)
	}

	rest, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := append(head, rest...); !bytes.Equal(got, old) {
		t.Errorf("a reader of the old binary saw %d bytes changing under it (%q...), want the old file intact", len(got), got[:min(len(got), 16)])
	}
	fresh, err := os.ReadFile(filepath.Join(dir, PluginName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(fresh, []byte("NEW ")) || len(fresh) != 4*8192 {
		t.Errorf("new binary not installed: %d bytes starting %q", len(fresh), fresh[:min(len(fresh), 8)])
	}
}

// Without --cni-plugin-source the plugin is looked for next to the agent's
// own executable (here, the test binary); the error still names the flag.
func TestInstallPluginDefaultSource(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("os.Executable: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), PluginName)); err == nil {
		t.Skipf("%s exists next to the test binary", PluginName)
	}
	dir := filepath.Join(t.TempDir(), "bin")
	_, err = installPlugin("", dir)
	if err == nil || !strings.Contains(err.Error(), "--cni-plugin-source") || !strings.Contains(err.Error(), filepath.Join(filepath.Dir(exe), PluginName)) {
		t.Fatalf("installPlugin(\"\") error = %v, want one naming --cni-plugin-source and %s", err, filepath.Join(filepath.Dir(exe), PluginName))
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("%s holds %q after a failed install", dir, names)
	}
}
