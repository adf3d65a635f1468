// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"testing"
	"time"
)

// The MAC label lane waits for a pause in the fills: not at all when none
// started, for the quiet time after one started, never beyond its bound
// however steadily fills start, and not past its context's end.
func TestMACLabelYieldsToFills(t *testing.T) {
	const quiet, bound = 100 * time.Millisecond, 400 * time.Millisecond
	within := func(t *testing.T, what string, lo, hi time.Duration, run func()) {
		t.Helper()
		start := time.Now()
		run()
		if d := time.Since(start); d < lo || d > hi {
			t.Errorf("%s: yield took %s, want between %s and %s", what, d, lo, hi)
		}
	}
	var none *Fills
	within(t, "nil Fills", 0, quiet, func() { none.yield(t.Context(), quiet, bound) })

	var f Fills
	within(t, "no fill started", 0, quiet, func() { f.yield(t.Context(), quiet, bound) })

	f.started()
	within(t, "a fill just started", quiet/2, bound+time.Second, func() { f.yield(t.Context(), quiet, bound) })

	f.started()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(quiet / 5)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				f.started()
			}
		}
	}()
	within(t, "fills starting steadily", bound, bound+2*time.Second, func() { f.yield(t.Context(), quiet, bound) })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	within(t, "context ended", 0, quiet, func() { f.yield(ctx, quiet, bound) })
	close(stop)
	<-done
}
