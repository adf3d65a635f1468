// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// event is one entry of the run's history: an operation step (a CNI
// request, a pod or claim write) or a fault, with when it started, when it
// ended and how it ended.
type event struct {
	Seq    int
	Op     int // the scheduled operation it belongs to (0 for faults)
	Start  time.Time
	End    time.Time
	What   string // "ADD", "DEL", "fault agent-kill" ...
	Target string // node, pod, sandbox, claim
	Result string
}

func (e event) String() string {
	end := "in flight"
	if !e.End.IsZero() {
		end = fmt.Sprintf("+%dms", e.End.Sub(e.Start).Milliseconds())
	}
	return fmt.Sprintf("#%d op%d %s %-9s %-7s %s -> %s", e.Seq, e.Op, e.Start.Format("15:04:05.000"), end, e.What, e.Target, e.Result)
}

// history keeps the last events in a ring buffer, so a violation can be
// printed with what led to it.
type history struct {
	mu   sync.Mutex
	ring []event
	next int // total events so far; ring index is next % len(ring)
}

func newHistory(n int) *history { return &history{ring: make([]event, n)} }

// begin records the start of an event and returns its sequence number.
func (h *history) begin(op int, what, target string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.ring[h.next%len(h.ring)] = event{Seq: h.next, Op: op, Start: time.Now(), What: what, Target: target}
	return h.next
}

// end records how event seq ended (if it is still in the buffer).
func (h *history) end(seq int, result string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := &h.ring[seq%len(h.ring)]; e.Seq == seq {
		e.End, e.Result = time.Now(), result
	}
}

// dump renders the buffered events (oldest first) that mention any of
// the keys, or all of them when keys is empty, plus the last n events.
func (h *history) dump(n int, keys ...string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	first := max(1, h.next-len(h.ring)+1)
	for seq := first; seq <= h.next; seq++ {
		e := h.ring[seq%len(h.ring)]
		recent := seq > h.next-n
		if recent || mentions(e, keys) {
			b.WriteString("  " + e.String() + "\n")
		}
	}
	return b.String()
}

func mentions(e event, keys []string) bool {
	for _, k := range keys {
		if k != "" && (strings.Contains(e.Target, k) || strings.Contains(e.Result, k)) {
			return true
		}
	}
	return false
}
