// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const values = `# The file's own comment, not a value's.

image:
  # -- the image
  repository: example.org/ipk
# -- extra | piped, see [install.md](docs/install.md#requirements)
# @default -- none
extra: {}
`

func TestRows(t *testing.T) {
	rows, err := Rows([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Key: "image.repository", Default: "`\"example.org/ipk\"`", Description: "the image"},
		{Key: "extra", Default: "none", Description: "extra | piped, see [install.md](docs/install.md#requirements)"},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	table := Table(rows, "charts/ipkeeper")
	if !strings.Contains(table, "| `extra` | none | extra \\| piped, see [install.md](../../docs/install.md#requirements) |\n") {
		t.Errorf("table:\n%s", table)
	}
	if got := Table(rows, "docs"); !strings.Contains(got, "[install.md](install.md#requirements)") {
		t.Errorf("table for docs/:\n%s", got)
	}
}

func TestRowsRefusesAnUndescribedValue(t *testing.T) {
	_, err := Rows([]byte("image:\n  # -- the image\n  repository: x\n  tag: v1\n"))
	if err == nil || !strings.Contains(err.Error(), "image.tag") {
		t.Fatalf("got %v, want an error naming image.tag", err)
	}
}

func TestCheckFailsOnAStaleTable(t *testing.T) {
	dir := t.TempDir()
	valuesPath := filepath.Join(dir, "values.yaml")
	doc := filepath.Join(dir, "README.md")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(valuesPath, values)
	write(doc, "# Chart\n\n"+BeginMarker+"\n| stale |\n"+EndMarker+"\n\nAfter.\n")
	if err := run(valuesPath, dir, true, []string{doc}); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("-check on a stale table: %v", err)
	}
	if err := run(valuesPath, dir, false, []string{doc}); err != nil {
		t.Fatal(err)
	}
	if err := run(valuesPath, dir, true, []string{doc}); err != nil {
		t.Fatalf("-check after writing: %v", err)
	}
	got, _ := os.ReadFile(doc)
	if !strings.HasSuffix(string(got), EndMarker+"\n\nAfter.\n") || !strings.Contains(string(got), "| `image.repository` |") {
		t.Errorf("written:\n%s", got)
	}
	write(doc, "no markers\n")
	if err := run(valuesPath, dir, false, []string{doc}); err == nil || !strings.Contains(err.Error(), "markers") && !strings.Contains(err.Error(), "want the lines") {
		t.Errorf("a file without markers: %v", err)
	}
}
