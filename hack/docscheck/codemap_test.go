// SPDX-License-Identifier: Apache-2.0

package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// codeMapDoc is the file whose "Code map" section has a row for every
// package; codeMapRoots are the trees it maps, at every depth (hack/ holds
// build tools the Make targets section describes, not the product).
const codeMapDoc = "docs/development.md"

var codeMapRoots = []string{"cmd", "internal", "pkg", "tests"}

var (
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	// pkgPathRE is a package path under one of codeMapRoots; a name with a
	// dot (a file such as tests/e2e/cluster.go) is not one.
	pkgPathRE = regexp.MustCompile(`^(cmd|internal|pkg|tests)(/[a-z0-9_-]+)+$`)
)

// goPackages are the directories under codeMapRoots with a .go file (test
// files included: tests/integration has only those), by slash path from
// the repository root; testdata and directories go ignores are skipped.
func goPackages(t *testing.T) []string {
	t.Helper()
	r := root(t)
	seen := map[string]bool{}
	for _, top := range codeMapRoots {
		err := filepath.WalkDir(filepath.Join(r, top), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if n := e.Name(); n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(e.Name(), ".go") {
				return nil
			}
			rel, err := filepath.Rel(r, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// codeMap reads the "## Code map" section of codeMapDoc: the packages its
// table's rows name in their first cell (a row may name several), and
// every other package path it names (prose, the other cells), each with
// its line.
func codeMap(t *testing.T) (rows map[string]int, mentions map[string]int) {
	t.Helper()
	d := readDoc(t, root(t), codeMapDoc)
	rows, mentions = map[string]int{}, map[string]int{}
	in := false
	for i, line := range d.lines {
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == "Code map"
			continue
		}
		if !in {
			continue
		}
		rest := line
		if cells := strings.Split(line, "|"); strings.HasPrefix(strings.TrimSpace(line), "|") && len(cells) > 2 {
			for _, m := range codeSpanRE.FindAllStringSubmatch(cells[1], -1) {
				if pkgPathRE.MatchString(m[1]) {
					rows[m[1]] = i
				}
			}
			rest = strings.Join(cells[2:], "|")
		}
		for _, m := range codeSpanRE.FindAllStringSubmatch(rest, -1) {
			if pkgPathRE.MatchString(m[1]) {
				mentions[m[1]] = i
			}
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no \"## Code map\" table naming packages", codeMapDoc)
	}
	return rows, mentions
}

// TestCodeMapNamesThePackagesThatExist: the code map of docs/development.md
// has a row for every Go package under cmd/, internal/, pkg/ and tests/,
// and names no package that does not exist (make lint and make test-unit
// run it).
func TestCodeMapNamesThePackagesThatExist(t *testing.T) {
	pkgs := goPackages(t)
	rows, mentions := codeMap(t)
	d := doc{path: codeMapDoc}
	var p problems
	for _, name := range sortedKeys(rows) {
		if !slices.Contains(pkgs, name) {
			p.add(d, rows[name], "the code map has a row for %s, which is not a Go package", name)
		}
	}
	for _, name := range sortedKeys(mentions) {
		if !slices.Contains(pkgs, name) {
			p.add(d, mentions[name], "the code map names %s, which is not a Go package", name)
		}
	}
	for _, name := range pkgs {
		if _, ok := rows[name]; !ok {
			p = append(p, codeMapDoc+": the code map has no row for the package "+name)
		}
	}
	p.report(t, "the code map and the packages disagree (add or remove the row)")
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
