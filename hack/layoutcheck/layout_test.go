// SPDX-License-Identifier: Apache-2.0

// Package layoutcheck keeps the boundaries the folders of internal/ show
// (docs/development.md, "Code map"): what runs on a node (internal/node,
// internal/cni) links nothing of the controller, of KubeVirt's controllers
// or of the kubectl plugin; the controller and the VM controllers link
// nothing of the node's; and a library at the top of internal/ (or the
// package kubevirt, facts both daemons read) links no binary's folder. An
// import that crosses a boundary is caught where it is added: every
// package that links across is named, with the package it links.
package layoutcheck

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const internal = "github.com/ipkeeper/ipkeeper/internal/"

// folder is the part of internal/ a package belongs to: "node", "cni",
// "controller", "kubevirt-controllers" (below internal/kubevirt), "cli",
// or "library" (the top of internal/, and internal/kubevirt itself).
func folder(pkg string) string {
	rel := strings.TrimPrefix(pkg, internal)
	first, rest, _ := strings.Cut(rel, "/")
	switch first {
	case "node", "cni", "controller", "cli":
		return first
	case "kubevirt":
		if rest != "" {
			return "kubevirt-controllers"
		}
	}
	return "library"
}

// forbidden lists, for each folder, the folders its packages may not link.
var forbidden = map[string][]string{
	"node":                 {"controller", "kubevirt-controllers", "cli"},
	"cni":                  {"node", "controller", "kubevirt-controllers", "cli", "library"},
	"controller":           {"node", "cni", "cli"},
	"kubevirt-controllers": {"node", "cni", "cli"},
	"cli":                  {"node", "cni"},
	"library":              {"node", "cni", "controller", "kubevirt-controllers", "cli"},
}

func TestFoldersKeepTheirBoundaries(t *testing.T) {
	deps := listDeps(t, "../../internal/...")
	if len(deps) < 20 {
		t.Fatalf("go list found %d internal packages; want the whole tree", len(deps))
	}
	for pkg, ds := range deps {
		from := folder(pkg)
		for _, d := range ds {
			to := folder(d)
			if to == from || !isForbidden(from, to) {
				continue
			}
			t.Errorf("%s (%s) links %s (%s): %s packages may not link %s ones; move the shared part to a library at the top of internal/",
				trim(pkg), from, trim(d), to, from, to)
		}
	}
}

// The rules catch what they are meant to: a node package linking a
// controller one, a library linking a binary's folder.
func TestFolderRules(t *testing.T) {
	for _, c := range []struct {
		from, to string
		want     bool
	}{
		{internal + "node/agent", internal + "controller/claimalloc", true},
		{internal + "node/agent", internal + "kubevirt/claims", true},
		{internal + "node/agent", internal + "kubevirt", false},
		{internal + "node/agent", internal + "ipam", false},
		{internal + "cni/cnishim", internal + "ipam", true},
		{internal + "ipam", internal + "node/agent", true},
		{internal + "kubevirt", internal + "kubevirt/webhook", true},
		{internal + "controller/gc", internal + "kubevirt/claims", false},
		{internal + "cli", internal + "controller/gc", false},
	} {
		if got := isForbidden(folder(c.from), folder(c.to)); got != c.want {
			t.Errorf("%s -> %s forbidden = %v, want %v", trim(c.from), trim(c.to), got, c.want)
		}
	}
}

func isForbidden(from, to string) bool { return slices.Contains(forbidden[from], to) }

func trim(pkg string) string { return "internal/" + strings.TrimPrefix(pkg, internal) }

// testOnly are packages for tests that no binary may link.
var testOnly = []string{internal + "calltrace"}

func TestNoBinaryLinksATestHelper(t *testing.T) {
	for bin, ds := range listDeps(t, "../../cmd/...") {
		for _, d := range ds {
			if slices.Contains(testOnly, d) {
				t.Errorf("%s links %s, a package for tests only", bin, trim(d))
			}
		}
	}
}

// listDeps returns, for each package of pattern (tests excluded: a
// test may drive what it checks from the other side), the internal
// packages it links, directly or not.
func listDeps(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	cmd := exec.Command(goBin, "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "../../internal/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		var own []string
		for _, d := range fields[1:] {
			if strings.HasPrefix(d, internal) {
				own = append(own, d)
			}
		}
		deps[fields[0]] = own
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return deps
}
