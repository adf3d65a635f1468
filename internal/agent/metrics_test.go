// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ipkeeper_agent_ready is 1 exactly while the agent serves CNI requests:
// caches synced and socket listening, as /readyz says.
func TestReadyMetric(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), nil)
	for _, tt := range []struct {
		name           string
		synced, listen bool
		want           float64
	}{
		{"starting", false, false, 0},
		{"listening, caches not synced", false, true, 0},
		{"serving", true, true, 1},
		{"shutting down", true, false, 0},
	} {
		a.ready.Store(tt.synced)
		a.serving.Store(tt.listen)
		if got := testutil.ToFloat64(a.metrics.ready); got != tt.want {
			t.Errorf("%s: ipkeeper_agent_ready = %v, want %v", tt.name, got, tt.want)
		}
		if (a.notReady() == nil) != (tt.want == 1) {
			t.Errorf("%s: /readyz disagrees with the metric (%v)", tt.name, a.notReady())
		}
	}
}
