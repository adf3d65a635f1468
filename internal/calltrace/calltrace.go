// SPDX-License-Identifier: Apache-2.0

// Package calltrace records a walk through the code: the call stack at
// one point (an IPReservation's create, say), outermost first, kept to
// one module's packages. Tests use it to count the walks
// docs/development.md gives ("Two walks") and to check that each reads
// down through the address engine; no product binary links it.
package calltrace

import (
	"fmt"
	"runtime"
	"strings"
)

// Step is one frame of a walk.
type Step struct {
	Package, Func, File string
	Line                int
}

// Walk is a call stack, outermost first.
type Walk []Step

// Here records the walk to its caller, kept to the packages whose import
// path begins with module.
func Here(module string) Walk {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var w Walk
	for {
		f, more := frames.Next()
		if pkg, fn, ok := split(f.Function); ok && strings.HasPrefix(pkg, module) {
			file := f.File
			if i := strings.LastIndex(file, "/"); i >= 0 {
				file = file[i+1:]
			}
			w = append(w, Step{Package: strings.TrimPrefix(pkg, module), Func: fn, File: file, Line: f.Line})
		}
		if !more {
			break
		}
	}
	for i, j := 0, len(w)-1; i < j; i, j = i+1, j-1 {
		w[i], w[j] = w[j], w[i]
	}
	return w
}

// split cuts a runtime function name ("a/b/pkg.(*T).M.func1") into its
// package path and the rest.
func split(name string) (pkg, fn string, ok bool) {
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if dot < 0 {
		return "", "", false
	}
	return name[:slash+1+dot], name[slash+2+dot:], true
}

// From is the walk from the outermost call of fn (a Step's Func) on;
// empty when fn is not on it.
func (w Walk) From(fn string) Walk {
	for i, s := range w {
		if s.Func == fn {
			return w[i:]
		}
	}
	return nil
}

// Packages is the walk's packages in the order it enters them, a stay in
// one package counted once.
func (w Walk) Packages() []string {
	var out []string
	for _, s := range w {
		if len(out) == 0 || out[len(out)-1] != s.Package {
			out = append(out, s.Package)
		}
	}
	return out
}

// Files counts the distinct files the walk goes through.
func (w Walk) Files() int {
	seen := map[string]bool{}
	for _, s := range w {
		seen[s.Package+"/"+s.File] = true
	}
	return len(seen)
}

// String is one frame a line, then the counts.
func (w Walk) String() string {
	var b strings.Builder
	for _, s := range w {
		fmt.Fprintf(&b, "%s %s (%s:%d)\n", s.Package, s.Func, s.File, s.Line)
	}
	fmt.Fprintf(&b, "%d calls in %d files, packages in order: %s", len(w), w.Files(), strings.Join(w.Packages(), " -> "))
	return b.String()
}
