// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyDeps must stay out of the shim: the runtime execs it for every pod
// network attachment, so it has to be small and quick to start.
var heavyDeps = []string{
	"k8s.io/client-go",
	"sigs.k8s.io/controller-runtime",
	"k8s.io/apimachinery",
	"k8s.io/api",
}

// TestNoHeavyDeps guards the shim's libraries; cmd/ipkeeper has the same
// check for the binary as a whole.
func TestNoHeavyDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	for _, pkg := range []string{
		"github.com/ipkeeper/ipkeeper/internal/cnishim",
		"github.com/ipkeeper/ipkeeper/internal/cniproto",
	} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		// One line per forbidden module keeps the failure readable.
		for _, heavy := range heavyDeps {
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
