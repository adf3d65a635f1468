// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	ipkscheme "github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
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

// Every reservation write is timed by verb, failed ones too: an ADD's
// duration less its create's is the agent's own work.
func TestWriteDurationPerVerb(t *testing.T) {
	s, err := ipkscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry(), func() int { return 0 }, func() bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	store := &apiStore{c: fake.NewClientBuilder().WithScheme(s).Build(), metrics: m}
	ctx := context.Background()
	r := reservation.New(reservation.Params{Pool: "blue", Key: "blue", Network: "blue", IP: netip.MustParseAddr("10.0.0.7"), Interface: "net1",
		Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "u1"}, Node: "n1"})
	if err := store.Create(ctx, r.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := store.Create(ctx, r.DeepCopy()); !errors.Is(err, ErrTaken) {
		t.Fatalf("second create: %v, want ErrTaken", err)
	}
	if err := store.Delete(ctx, "not-there", "u2", ""); err == nil {
		t.Fatal("delete of a reservation that does not exist succeeded")
	}
	if got := testutil.CollectAndCount(m.writeLatency); got != 2 {
		t.Errorf("ipkeeper_agent_api_write_duration_seconds has %d series, want 2 (create, delete)", got)
	}
	for verb, want := range map[string]int{"create": 2, "delete": 1} {
		var h dto.Metric
		if err := m.writeLatency.WithLabelValues(verb).(prometheus.Histogram).Write(&h); err != nil {
			t.Fatal(err)
		}
		if got := h.GetHistogram().GetSampleCount(); got != uint64(want) {
			t.Errorf("ipkeeper_agent_api_write_duration_seconds{verb=%q} count = %d, want %d", verb, got, want)
		}
	}
}
