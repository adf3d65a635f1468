// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHeavyDeps keeps Kubernetes client libraries out of the CNI binary
// and the libraries it is made of: the runtime execs it for every pod
// network attachment, so it must be small and quick to start. Talking to
// the API server is the agent's job. The libraries are checked on their
// own too, so a heavy import is caught where it is added, even before the
// binary uses it.
func TestNoHeavyDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	for _, pkg := range []string{
		"github.com/ipkeeper/ipkeeper/cmd/ipkeeper",
		"github.com/ipkeeper/ipkeeper/internal/cnishim",
		"github.com/ipkeeper/ipkeeper/internal/cniproto",
	} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		// One line per forbidden module keeps the failure readable.
		for _, heavy := range []string{
			"k8s.io/client-go",
			"sigs.k8s.io/controller-runtime",
			"k8s.io/apimachinery",
			"k8s.io/api",
		} {
			var hits []string
			for _, dep := range strings.Fields(string(out)) {
				if dep == heavy || strings.HasPrefix(dep, heavy+"/") {
					hits = append(hits, dep)
				}
			}
			if len(hits) > 0 {
				t.Errorf("%s depends on %d %s packages, e.g. %s", pkg, len(hits), heavy, hits[0])
			}
		}
	}
}
