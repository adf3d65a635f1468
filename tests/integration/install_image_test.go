// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The image cannot be built here (no registry for the base images), so this
// checks what it is made of: `make build`, the Dockerfile's build step,
// yields static binaries for every command, and the Dockerfile ships all of
// them in one image.
func TestImageContentsAreStaticBinaries(t *testing.T) {
	root := repoPath(t)
	cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var binaries []string
	for _, c := range cmds {
		if c.IsDir() {
			binaries = append(binaries, c.Name())
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	copyLine := regexp.MustCompile(`(?m)^COPY --from=build (.+) /usr/bin/$`).FindSubmatch(dockerfile)
	if copyLine == nil {
		t.Fatal("Dockerfile has no COPY --from=build ... /usr/bin/ line")
	}
	var shipped []string
	for _, p := range strings.Fields(string(copyLine[1])) {
		shipped = append(shipped, filepath.Base(p))
	}
	slices.Sort(shipped)
	slices.Sort(binaries)
	if !slices.Equal(shipped, binaries) {
		t.Errorf("Dockerfile ships %v, the commands are %v", shipped, binaries)
	}
	if !strings.Contains(string(dockerfile), "USER 65532:65532") {
		t.Error("the image does not default to a non-root user")
	}

	out := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "build", "BIN_DIR="+out, "VERSION=test")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, b)
	}
	for _, b := range binaries {
		f, err := elf.Open(filepath.Join(out, b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked; the distroless static image cannot run it", b)
			}
		}
		_ = f.Close()
		if v, err := exec.Command(filepath.Join(out, b), "--version").Output(); b != "ipkeeper" && (err != nil || strings.TrimSpace(string(v)) != "test") {
			t.Errorf("%s --version = %q, %v; want the build's version", b, v, err)
		}
	}
}
