// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"errors"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRegisterMetricsTwice: registering the controller's own collectors
// again is a no-op (New runs more than once per test process); another
// collector of one of their names is refused.
func TestRegisterMetricsTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if err := RegisterMetrics(reg); err != nil {
		t.Fatalf("second registration of the same collectors: %v", err)
	}

	other := prometheus.NewRegistry()
	impostor := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ipkeeper_controller_kubevirt_support",
		Help: "1 while KubeVirt support (IPAMClaim controllers, virt-launcher pod webhook) runs because KubeVirt's CRDs are installed; 0 without them (reservation garbage collection only).",
	})
	other.MustRegister(impostor)
	err := RegisterMetrics(other)
	var dup prometheus.AlreadyRegisteredError
	if !errors.As(err, &dup) || dup.ExistingCollector != impostor {
		t.Fatalf("registering over another collector of the same name: got %v, want an AlreadyRegisteredError naming it", err)
	}
}

// probe is a collector of one metric name, to look the name up in a
// registry: a second descriptor of one name is refused whatever its
// labels, and vectors without children are not gathered.
type probe struct{ desc *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probe) Collect(chan<- prometheus.Metric)    {}

var controllerMetricRE = regexp.MustCompile(`ipkeeper_controller_[a-z0-9_]*[a-z0-9]`)

// TestRegisterMetricsCoversTheDocs: every ipkeeper-controller metric that
// docs/monitoring.md names is registered by RegisterMetrics.
func TestRegisterMetricsCoversTheDocs(t *testing.T) {
	text, err := os.ReadFile("../../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range controllerMetricRE.FindAllString(string(text), -1) {
		names[n] = true
	}
	if len(names) == 0 {
		t.Fatal("docs/monitoring.md names no ipkeeper_controller_ metric: is the pattern broken?")
	}
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	for name := range names {
		p := probe{prometheus.NewDesc(name, "a probe of the name", []string{"probe_label"}, nil)}
		if err := reg.Register(p); err == nil {
			t.Errorf("%s: documented in docs/monitoring.md but not registered by RegisterMetrics", name)
			reg.Unregister(p)
		}
	}
	t.Logf("%d documented controller metrics checked", len(names))
}
