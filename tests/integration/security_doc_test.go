// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestThreatModelNamesItsTests keeps docs/security.md's threat model honest:
// every row of its tables names at least one test, and every test it names
// exists in the repository.
func TestThreatModelNamesItsTests(t *testing.T) {
	root := repoPath(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Threat model\n")
	if !ok {
		t.Fatal(`docs/security.md has no "## Threat model" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}

	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	lines := strings.Split(section, "\n")
	wanted := map[string]bool{}
	rows := 0
	for i, line := range lines {
		isRow := strings.HasPrefix(line, "|")
		isSeparator := strings.HasPrefix(line, "| ---")
		isHeader := i+1 < len(lines) && strings.HasPrefix(lines[i+1], "| ---")
		if !isRow || isSeparator || isHeader {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		tests := named.FindAllStringSubmatch(cells[len(cells)-1], -1)
		if len(tests) == 0 {
			t.Errorf("docs/security.md: this row names no test in its last cell:\n%s", line)
		}
		for _, m := range tests {
			wanted[m[1]] = true
		}
	}
	if rows < 30 {
		t.Fatalf("docs/security.md's threat model has %d table rows; the tables were not found", rows)
	}

	defined := map[string]bool{}
	decl := regexp.MustCompile(`^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "vendor" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for s.Scan() {
			if m := decl.FindStringSubmatch(s.Text()); m != nil {
				defined[m[1]] = true
			}
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range wanted {
		if !defined[name] {
			t.Errorf("docs/security.md names %s, which no test file defines", name)
		}
	}
}
