// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHeavyDeps keeps the CNI binary, and the libraries it is made of,
// small: the runtime execs it for every pod network attachment, so its
// start-up is paid on every ADD and DEL, and a Go binary starts more
// slowly the more packages it links and initialises. Talking to the API
// server is the agent's job (no Kubernetes client libraries), and the
// shim talks to the agent in frames, not HTTP (no net/http, and so no TLS,
// x509, MIME or compression). The libraries are checked on their own too,
// so a heavy import is caught where it is added, even before the binary
// uses it.
func TestNoHeavyDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	// Each entry forbids a package and those below it.
	heavy := []string{
		"k8s.io/client-go",
		"sigs.k8s.io/controller-runtime",
		"k8s.io/apimachinery",
		"k8s.io/api",
		"net/http",
		"crypto/tls",
		"crypto/x509",
		"mime",
		"compress",
		"net/url",
		"log/slog",
		"github.com/go-logr/logr",
		"github.com/prometheus",
		"runtime/debug",
	}
	for _, pkg := range []string{
		"github.com/ipkeeper/ipkeeper/cmd/ipkeeper",
		"github.com/ipkeeper/ipkeeper/internal/cni/cnishim",
		"github.com/ipkeeper/ipkeeper/internal/cni/cniproto",
	} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		// One line per forbidden entry keeps the failure readable.
		for _, h := range heavy {
			var hits []string
			for _, dep := range deps {
				if dep == h || strings.HasPrefix(dep, h+"/") {
					hits = append(hits, dep)
				}
			}
			if len(hits) > 0 {
				t.Errorf("%s depends on %d %s packages, e.g. %s", pkg, len(hits), h, hits[0])
			}
		}
		// A ceiling on the count catches what the list above does not
		// name. It is the count when the list was written plus a margin;
		// raise it only for a package the shim needs.
		if maxDeps := 110; len(deps) > maxDeps {
			t.Errorf("%s depends on %d packages, more than the %d allowed; see `go list -deps %s`", pkg, len(deps), maxDeps, pkg)
		}
	}
}
