// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"sync/atomic"
	"time"
)

// Fills tells the MAC label lane when claims are being filled, so that it
// yields the API server to them: in a boot storm the label (a write only
// people read) took a share of the API server's CPU from the fills that
// launchers wait on. One value is shared by the Reconciler, which marks
// each fill it starts, and the MACLabeler, which waits for a pause.
type Fills struct {
	// last is when the last fill started (UnixNano); 0 before any.
	last atomic.Int64
}

// labelQuiet is how long no fill must have started before a label is
// written; labelWaitMax bounds one label's wait, so that a steady stream
// of fills (or of retries of an exhausted pool) slows the labels, never
// stops them.
const (
	labelQuiet   = 250 * time.Millisecond
	labelWaitMax = time.Second
)

// started marks a fill starting now. A nil Fills marks nothing.
func (f *Fills) started() {
	if f != nil {
		f.last.Store(time.Now().UnixNano())
	}
}

// yield returns once no fill has started for quiet, after max at most, or
// when ctx ends. A nil Fills returns at once.
func (f *Fills) yield(ctx context.Context, quiet, max time.Duration) {
	if f == nil {
		return
	}
	deadline := time.Now().Add(max)
	for {
		now := time.Now()
		wait := quiet - now.Sub(time.Unix(0, f.last.Load()))
		if wait <= 0 || !now.Before(deadline) {
			return
		}
		t := time.NewTimer(min(wait, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
