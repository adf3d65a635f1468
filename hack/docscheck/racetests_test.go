// SPDX-License-Identifier: Apache-2.0

package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The integration suite runs without the race detector but for the tests
// INTEGRATION_RACE_TESTS names in the Makefile, which run again under it:
// a renamed or removed one would silently run nowhere under -race, since a
// -run pattern that matches nothing passes.
func TestIntegrationRaceTestsExist(t *testing.T) {
	r := root(t)
	makefile, err := os.ReadFile(filepath.Join(r, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^INTEGRATION_RACE_TESTS := \^\(([A-Za-z0-9_|]+)\)\$\$$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no INTEGRATION_RACE_TESTS := ^(TestA|TestB)$$ line")
	}
	files, err := filepath.Glob(filepath.Join(r, "tests", "integration", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, name := range strings.Split(string(m[1]), "|") {
		if !strings.Contains(src.String(), "\nfunc "+name+"(t *testing.T)") {
			t.Errorf("INTEGRATION_RACE_TESTS names %s, which is no test of tests/integration", name)
		}
	}
}
