// SPDX-License-Identifier: Apache-2.0

package ipam_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// While no block can be taken every request borrows and each would log
// the same failure: the hook logs it once a minute, not per request.
func TestLogBlockErrorsAtMostOncePerMinute(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{})
	failed := ipam.LogBlockErrors(log, "cannot take an address block")
	for i := range 50 {
		failed(errors.New("blocks are forbidden: " + strings.Repeat("x", i%3)))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 {
		t.Fatalf("%d lines logged for 50 failures within a minute, want 1: %q", len(lines), lines)
	}
	if !strings.Contains(lines[0], "cannot take an address block") || !strings.Contains(lines[0], "blocks are forbidden") {
		t.Errorf("logged %q; want the message and the first error", lines[0])
	}
}

// Each hook keeps its own minute: one holder's failures do not silence
// another's.
func TestLogBlockErrorsPerHook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	count := map[string]int{}
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range []string{"pods", "claims"} {
			if strings.Contains(args, m) {
				count[m]++
			}
		}
	}, funcr.Options{})
	pods, claims := ipam.LogBlockErrors(log, "pods"), ipam.LogBlockErrors(log, "claims")
	for range 3 {
		pods(errors.New("boom"))
		claims(errors.New("boom"))
	}
	mu.Lock()
	defer mu.Unlock()
	if count["pods"] != 1 || count["claims"] != 1 {
		t.Errorf("logged %v, want each hook's message once", count)
	}
}
