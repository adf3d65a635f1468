// SPDX-License-Identifier: Apache-2.0

package backlog

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// Items count from their moment on; the oldest's age is the largest.
func TestSinceStats(t *testing.T) {
	var s Since[string]
	if n, oldest := s.Stats(t0); n != 0 || oldest != 0 {
		t.Fatalf("empty: %d, %s", n, oldest)
	}
	s.Set("a", t0.Add(-time.Minute))
	s.Set("b", t0.Add(-time.Hour))
	s.Set("later", t0.Add(time.Minute)) // not due yet
	s.SetIfAbsent("a", t0)              // a waits already: kept
	if n, oldest := s.Stats(t0); n != 2 || oldest != time.Hour {
		t.Errorf("got %d, %s; want 2, 1h", n, oldest)
	}
	s.Delete("b")
	if n, oldest := s.Stats(t0); n != 1 || oldest != time.Minute {
		t.Errorf("after deleting b: %d, %s; want 1, 1m", n, oldest)
	}
	if n, oldest := s.Stats(t0.Add(2 * time.Minute)); n != 2 || oldest != 3*time.Minute {
		t.Errorf("two minutes later: %d, %s; want 2, 3m", n, oldest)
	}
}

// The collector sums counts and takes the greatest age over its sources,
// forgets a removed source, and exports zeros without any.
func TestCollector(t *testing.T) {
	c := New("test_waiting", "Waiting.", "test_oldest_waiting_seconds", "Oldest.")
	c.Now = func() time.Time { return t0 }
	want := func(n, oldest string) string {
		return `
# HELP test_oldest_waiting_seconds Oldest.
# TYPE test_oldest_waiting_seconds gauge
test_oldest_waiting_seconds ` + oldest + `
# HELP test_waiting Waiting.
# TYPE test_waiting gauge
test_waiting ` + n + `
`
	}
	check := func(what, n, oldest string) {
		t.Helper()
		if err := testutil.CollectAndCompare(c, strings.NewReader(want(n, oldest))); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	check("no source", "0", "0")
	var a, b Since[int]
	a.Set(1, t0.Add(-10*time.Second))
	b.Set(1, t0.Add(-90*time.Second))
	b.Set(2, t0.Add(-5*time.Second))
	c.Add(a.Stats)
	removeB := c.Add(b.Stats)
	check("two sources", "3", "90")
	removeB()
	check("b removed", "1", "10")
}
