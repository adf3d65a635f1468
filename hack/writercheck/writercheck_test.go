// SPDX-License-Identifier: Apache-2.0

// Package writercheck checks that each of the objects ipkeeper allocates
// with has its declared writers only: every write of an IPReservation goes
// through package reservation, every write of an IPBlock through package
// blocks, and an IPAMClaim is written only by the packages the table below
// names (docs/development.md, "Who writes what, in the code", says which
// field each writes). It type-checks the product packages against the
// build cache's export data (go list -export) and looks at every call of
// a controller-runtime client write (Create, Update, Patch, Delete,
// DeleteAllOf, Apply, on a client or its status and subresource writers)
// whose object is one of those kinds. Within an IPAMClaim's status, each
// part (a field, a condition) has its one writer too: claimstatus.Parts
// declares them, and parts_test.go holds the code to it.
package writercheck

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/ipkeeper/ipkeeper/"

// writers are the packages that may write each kind.
var writers = map[string][]string{
	"IPReservation": {"internal/reservation"},
	"IPBlock":       {"internal/blocks"},
	// claims: a VM's claims (metadata, finalizers, deletion); claimaddrs:
	// status.ips, IPsAllocated, RequestedAddresses, the MAC label;
	// claimstatus: the one status write (Write); handover: the migration
	// annotations; poolstatus: AddressesInPool (through claimstatus);
	// guestnet: GuestAddresses (through claimstatus); cli: import
	// whereabouts.
	"IPAMClaim": {"internal/kubevirt/claims", "internal/controller/claimaddrs", "internal/claimstatus", "internal/kubevirt/handover", "internal/cli"},
}

// kinds maps the types checked to their kind.
var kinds = map[string]string{
	module + "pkg/apis/ipkeeper/v1alpha1.IPReservation":                                "IPReservation",
	module + "pkg/apis/ipkeeper/v1alpha1.IPBlock":                                      "IPBlock",
	"github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1.IPAMClaim": "IPAMClaim",
}

var writeMethods = map[string]bool{"Create": true, "Update": true, "Patch": true, "Delete": true, "DeleteAllOf": true, "Apply": true}

const clientPkg = "sigs.k8s.io/controller-runtime/pkg/client"

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Standard   bool
}

// A write is one call of a client write method on an object of a checked kind.
type write struct {
	pkg, pos, kind, method string
}

func TestEachKindHasItsDeclaredWritersOnly(t *testing.T) {
	writes := findWrites(t, "./internal/...", "./cmd/...")
	var bad []string
	seen := map[string]bool{}
	for _, w := range writes {
		seen[w.kind] = true
		if !allowed(w) {
			bad = append(bad, fmt.Sprintf("%s: %s of %s from package %s; only %s may write it (add the write there, or declare the package in hack/writercheck and docs/development.md's writer table)",
				w.pos, w.method, w.kind, w.pkg, strings.Join(writers[w.kind], ", ")))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	// The check finds writes at all: each kind is written somewhere.
	for kind := range writers {
		if !seen[kind] {
			t.Errorf("no write of %s found: the check no longer sees the client's write methods", kind)
		}
	}
}

func allowed(w write) bool {
	for _, p := range writers[w.kind] {
		if w.pkg == p || strings.HasPrefix(w.pkg, p+"/") {
			return true
		}
	}
	return false
}

// checked is one product package, type-checked.
type checked struct {
	rel   string // import path from the module root
	files []*ast.File
	info  *types.Info
}

// loadPackages type-checks the product packages matching patterns against
// the build cache's export data.
func loadPackages(t *testing.T, patterns ...string) (*token.FileSet, []checked) {
	t.Helper()
	root := repoRoot(t)
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,Standard"}, patterns...)...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	exports := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if strings.HasPrefix(p.ImportPath, module+"internal/") || strings.HasPrefix(p.ImportPath, module+"cmd/") {
			pkgs = append(pkgs, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var out2 []checked
	for _, p := range pkgs {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		out2 = append(out2, checked{rel: strings.TrimPrefix(p.ImportPath, module), files: files, info: info})
	}
	return fset, out2
}

// position is pos relative to the repository's root.
func position(t *testing.T, fset *token.FileSet, pos token.Pos) string {
	p := fset.Position(pos)
	if r, err := filepath.Rel(repoRoot(t), p.Filename); err == nil {
		p.Filename = r
	}
	return p.String()
}

// findWrites returns the product packages' writes of the checked kinds.
func findWrites(t *testing.T, patterns ...string) []write {
	t.Helper()
	fset, pkgs := loadPackages(t, patterns...)
	var writes []write
	for _, p := range pkgs {
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !writeMethods[sel.Sel.Name] || !isClientMethod(p.info, sel) {
					return true
				}
				if kind := kindOf(p.info.Types[call.Args[1]].Type); kind != "" {
					writes = append(writes, write{pkg: p.rel, pos: position(t, fset, call.Pos()), kind: kind, method: sel.Sel.Name})
				}
				return true
			})
		}
	}
	return writes
}

// isClientMethod reports whether sel is a method of controller-runtime's
// client package: its Client, Writer, StatusWriter, SubResourceWriter...
func isClientMethod(info *types.Info, sel *ast.SelectorExpr) bool {
	s, ok := info.Selections[sel]
	if !ok {
		return false
	}
	fn, ok := s.Obj().(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == clientPkg
}

// kindOf returns the checked kind of an object's type (a pointer to one
// of the kinds), or "".
func kindOf(t types.Type) string {
	if t == nil {
		return ""
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return ""
	}
	return kinds[n.Obj().Pkg().Path()+"."+n.Obj().Name()]
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(dir))
}

// The writer table of docs/development.md names, in a row of each kind,
// every package the check lets write it: the table and the code agree on
// who writes what.
func TestWriterTableNamesTheDeclaredWriters(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		for kind := range writers {
			if strings.HasPrefix(line, "| `"+kind+"`") {
				rows[kind] = append(rows[kind], line)
			}
		}
	}
	for kind, pkgs := range writers {
		if len(rows[kind]) == 0 {
			t.Errorf("docs/development.md's writer table has no row of %s", kind)
			continue
		}
		for _, p := range pkgs {
			if !namesPackage(rows[kind], filepath.Base(p)) {
				t.Errorf("docs/development.md's writer table names package %s in no row of %s, which it writes", p, kind)
			}
		}
	}
}

// namesPackage reports whether a row names pkg: `pkg`, `pkg.Func`, or
// internal/pkg.
func namesPackage(rows []string, pkg string) bool {
	for _, r := range rows {
		if strings.Contains(r, "`"+pkg+"`") || strings.Contains(r, "`"+pkg+".") || strings.Contains(r, "internal/"+pkg) {
			return true
		}
	}
	return false
}
