// SPDX-License-Identifier: Apache-2.0

package writercheck

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
)

const (
	claimstatusPkg = module + "internal/claimstatus"
	ipamclaimsPkg  = "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metaPkg        = "k8s.io/apimachinery/pkg/api/meta"
	metav1Pkg      = "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusFields are the IPAMClaimStatus fields ipkeeper writes, by part.
var statusFields = map[string]string{"IPs": claimstatus.PartIPs, "OwnerPod": claimstatus.PartOwnerPod}

// A set is one place a package sets a part of an IPAMClaim's status.
type set struct {
	pkg, pos, part, how string
}

// Each part of an IPAMClaim's status is set only by the package
// claimstatus.Parts names for it: its field assigned, its condition built
// (a metav1.Condition of its type) or removed, or claimstatus' constructor
// of it called.
func TestEachClaimPartHasItsDeclaredWriterOnly(t *testing.T) {
	sets := findSets(t, "./internal/...", "./cmd/...")
	var bad []string
	seen := map[string]bool{}
	for _, s := range sets {
		seen[s.part] = true
		if !slices.Contains(claimstatus.Parts[s.part], s.pkg) {
			bad = append(bad, fmt.Sprintf("%s: %s of the IPAMClaim part %s from package %s; only %s may set it (set it there, or declare the package in claimstatus.Parts and docs/development.md's writer table)",
				s.pos, s.how, s.part, s.pkg, strings.Join(claimstatus.Parts[s.part], ", ")))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	// The check sees the parts: each declared one is set somewhere.
	for part := range claimstatus.Parts {
		if !seen[part] {
			t.Errorf("no set of the IPAMClaim part %s found: the check no longer sees it, or claimstatus.Parts names a part nothing writes", part)
		}
	}
	for fn, part := range claimstatus.Constructors {
		if _, ok := claimstatus.Parts[part]; !ok {
			t.Errorf("claimstatus.Constructors: %s builds %s, which claimstatus.Parts does not declare", fn, part)
		}
	}
}

// findSets returns where the product packages, claimstatus aside (it
// builds the parts its constructors return), set a part of an IPAMClaim's
// status.
func findSets(t *testing.T, patterns ...string) []set {
	t.Helper()
	fset, pkgs := loadPackages(t, patterns...)
	var sets []set
	for _, p := range pkgs {
		if module+p.rel == claimstatusPkg {
			continue
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				if part, how := partSet(p.info, n); part != "" {
					sets = append(sets, set{pkg: p.rel, pos: position(t, fset, n.Pos()), part: part, how: how})
				}
				return true
			})
		}
	}
	return sets
}

// partSet returns the part n sets, and how, or "".
func partSet(info *types.Info, n ast.Node) (part, how string) {
	switch n := n.(type) {
	case *ast.AssignStmt:
		for _, lhs := range n.Lhs {
			if part := statusField(info, lhs); part != "" {
				return part, "an assignment"
			}
		}
	case *ast.CompositeLit:
		if !isNamed(info.Types[n].Type, metav1Pkg, "Condition") {
			return "", ""
		}
		for _, e := range n.Elts {
			if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Type") {
				if part := conditionConst(info, kv.Value); part != "" {
					return part, "a condition built"
				}
			}
		}
	case *ast.CallExpr:
		fn := calledFunc(info, n)
		switch {
		case fn == nil || fn.Pkg() == nil:
		case fn.Pkg().Path() == claimstatusPkg && claimstatus.Constructors[fn.Name()] != "":
			return claimstatus.Constructors[fn.Name()], "a call of claimstatus." + fn.Name()
		case fn.Pkg().Path() == metaPkg && fn.Name() == "RemoveStatusCondition" && len(n.Args) == 2:
			if part := conditionConst(info, n.Args[1]); part != "" {
				return part, "a condition removed"
			}
		}
	}
	return "", ""
}

// statusField returns the part e names when it is a written field of an
// IPAMClaimStatus (x.Status.IPs, st.OwnerPod), or "".
func statusField(info *types.Info, e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	s, ok := info.Selections[sel]
	if !ok || s.Kind() != types.FieldVal {
		return ""
	}
	if !isNamed(s.Recv(), ipamclaimsPkg, "IPAMClaimStatus") {
		return ""
	}
	return statusFields[sel.Sel.Name]
}

// conditionConst returns the condition type e names when it is one of
// claimstatus' condition constants that Parts declares, or "".
func conditionConst(info *types.Info, e ast.Expr) string {
	var id *ast.Ident
	switch e := e.(type) {
	case *ast.Ident:
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return ""
	}
	c, ok := info.Uses[id].(*types.Const)
	if !ok || c.Pkg() == nil || c.Pkg().Path() != claimstatusPkg || c.Val().Kind() != constant.String {
		return ""
	}
	v := constant.StringVal(c.Val())
	if _, ok := claimstatus.Parts[v]; !ok {
		return ""
	}
	return v
}

func calledFunc(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := call.Fun.(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	return fn
}

func isNamed(t types.Type, pkg, name string) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == pkg && n.Obj().Name() == name
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// The writer table of docs/development.md names each part of an
// IPAMClaim's status in a row that names its writers.
func TestWriterTableNamesEachClaimPartsWriter(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `IPAMClaim`") {
			rows = append(rows, line)
		}
	}
	for part, pkgs := range claimstatus.Parts {
		var of []string
		for _, r := range rows {
			if strings.Contains(r, "`"+part+"`") {
				of = append(of, r)
			}
		}
		if len(of) == 0 {
			t.Errorf("docs/development.md's writer table has no IPAMClaim row naming `%s`", part)
			continue
		}
		for _, p := range pkgs {
			if !namesPackage(of, filepath.Base(p)) {
				t.Errorf("docs/development.md's writer table names package %s in no IPAMClaim row of `%s`, which it writes", p, part)
			}
		}
	}
}
