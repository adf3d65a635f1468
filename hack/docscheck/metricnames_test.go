// SPDX-License-Identifier: Apache-2.0

package docscheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
)

// daemon is one binary's metrics registry, as the binary serves it on
// /metrics, and the metrics of the libraries under it, which keep their
// own names.
type daemon struct {
	binary    string
	registry  prometheus.Gatherer
	register  prometheus.Registerer
	libraries []string
}

// TestMetricNames: every metric a daemon registers is named
// ipkeeper_<binary>_<concept>_<what>[_unit][_total] after the binary that
// serves it (the webhook, the garbage collectors and the pool status run
// in ipkeeper-controller), uses one word per concept within its binary
// (never both "claim" and "claims"), and follows Prometheus' conventions
// (promlint's: counters end _total and nothing else does, base units,
// snake_case; histograms and durations in _seconds or _bytes; an _info
// gauge is 1).
//
// A vector without children is not gathered yet, so every ipkeeper_* name
// the sources declare (codeMetrics) is also looked up in each registry:
// registering a collector of that name fails exactly where one exists.
func TestMetricNames(t *testing.T) {
	daemons := []daemon{
		{"controller", controllerRegistry(t), ctrlmetrics.Registry,
			[]string{"controller_runtime_", "workqueue_", "rest_client_", "certwatcher_", "leader_election_", "go_", "process_"}},
		agentDaemon(t),
	}
	names, kinds := codeMetrics(t)
	var problems []string
	var lint []*dto.MetricFamily
	gathered := map[string]bool{}
	concepts := map[string]map[string][]string{} // binary -> concept -> names
	for _, d := range daemons {
		concepts[d.binary] = map[string][]string{}
		families, err := d.registry.Gather()
		if err != nil {
			t.Fatalf("gathering ipkeeper-%s's metrics: %v", d.binary, err)
		}
		for _, mf := range families {
			name := mf.GetName()
			if library(name, d.libraries) {
				continue
			}
			gathered[name] = true
			lint = append(lint, mf)
			if !strings.HasPrefix(name, "ipkeeper_") {
				problems = append(problems, fmt.Sprintf("%s (ipkeeper-%s): neither ipkeeper's nor a known library's", name, d.binary))
			}
		}
	}
	for name, file := range names {
		var owners []daemon
		for _, d := range daemons {
			if registered(d.register, name) {
				owners = append(owners, d)
			}
		}
		if len(owners) != 1 {
			problems = append(problems, fmt.Sprintf("%s (%s): registered by %d binaries, want 1", name, file, len(owners)))
			continue
		}
		prefix := "ipkeeper_" + owners[0].binary + "_"
		what, ok := strings.CutPrefix(name, prefix)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: served by ipkeeper-%s, so its name starts %s", name, owners[0].binary, prefix))
			continue
		}
		concept, _, _ := strings.Cut(what, "_")
		concepts[owners[0].binary][concept] = append(concepts[owners[0].binary][concept], name)
		if t, ok := declaredType[kinds[name]]; ok && !gathered[name] {
			// Not gathered (a vector without children): lint what the
			// source declares.
			lint = append(lint, &dto.MetricFamily{Name: &name, Help: &name, Type: &t})
		}
	}
	for binary, byConcept := range concepts {
		for concept, ns := range byConcept {
			if other, ok := byConcept[concept+"s"]; ok {
				sort.Strings(ns)
				sort.Strings(other)
				problems = append(problems, fmt.Sprintf("ipkeeper-%s names one concept twice, %q (%s) and %q (%s)",
					binary, concept, strings.Join(ns, ", "), concept+"s", strings.Join(other, ", ")))
			}
		}
	}
	l := promlint.NewWithMetricFamilies(lint)
	l.AddCustomValidations(lintUnits, lintInfo)
	found, err := l.Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range found {
		problems = append(problems, p.Metric+": "+p.Text)
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Errorf("metric names that break the naming scheme:\n  %s", strings.Join(problems, "\n  "))
	}
	if len(names) == 0 || len(lint) == 0 {
		t.Fatalf("no metric found (%d declared, %d gathered): is the scan or the registry broken?", len(names), len(lint))
	}
}

// declaredType is the metric type of each prometheus *Opts literal.
var declaredType = map[string]dto.MetricType{
	"CounterOpts":   dto.MetricType_COUNTER,
	"GaugeOpts":     dto.MetricType_GAUGE,
	"HistogramOpts": dto.MetricType_HISTOGRAM,
	"SummaryOpts":   dto.MetricType_SUMMARY,
}

func library(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// probe is a collector of one metric name, to look the name up in a
// registry.
type probe struct{ desc *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// registered reports whether reg holds a metric called name: a second
// descriptor of one name is refused whatever its labels.
func registered(reg prometheus.Registerer, name string) bool {
	p := probe{prometheus.NewDesc(name, "a probe of the name", []string{"probe_label"}, nil)}
	if err := reg.Register(p); err != nil {
		return true
	}
	reg.Unregister(p)
	return false
}

// durationRE matches the names of metrics that measure time.
var durationRE = regexp.MustCompile(`_(duration|oldest|age|latency)(_|$)`)

// lintUnits: a histogram or summary, and any metric of a duration, says
// its base unit.
func lintUnits(mf *dto.MetricFamily) []error {
	name := mf.GetName()
	switch {
	case (mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY) &&
		!strings.HasSuffix(name, "_seconds") && !strings.HasSuffix(name, "_bytes"):
		return []error{errors.New(`histograms and summaries end with their base unit, "_seconds" or "_bytes"`)}
	case durationRE.MatchString(name) && !strings.HasSuffix(name, "_seconds"):
		return []error{errors.New(`a duration ends "_seconds"`)}
	}
	return nil
}

// lintInfo: an _info metric is a gauge whose samples are 1, its labels
// the information.
func lintInfo(mf *dto.MetricFamily) []error {
	if !strings.HasSuffix(mf.GetName(), "_info") {
		return nil
	}
	if mf.GetType() != dto.MetricType_GAUGE {
		return []error{errors.New("an _info metric is a gauge")}
	}
	for _, m := range mf.GetMetric() {
		if m.GetGauge().GetValue() != 1 {
			return []error{errors.New("an _info metric's samples are 1")}
		}
	}
	return nil
}

// controllerRegistry is controller-runtime's registry with the
// controller's metrics registered, as manager.New registers them.
func controllerRegistry(t *testing.T) ctrlmetrics.RegistererGatherer {
	t.Helper()
	if err := manager.RegisterMetrics(ctrlmetrics.Registry); err != nil {
		t.Fatalf("registering ipkeeper-controller's metrics: %v", err)
	}
	return ctrlmetrics.Registry
}

// agentDaemon builds the agent's registry as cmd/ipkeeper-agent does: the
// Go runtime's and the process's collectors, then agent.New's. agent.New
// resolves the pods it caches against the API server's discovery, which
// a static discovery document answers; nothing else is called before Run.
func agentDaemon(t *testing.T) daemon {
	t.Helper()
	discovery := map[string]any{
		"/api":  metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}},
		"/apis": metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}},
		"/api/v1": metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
			APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get", "list", "watch"}}}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := discovery[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := agent.New(&rest.Config{Host: srv.URL}, agent.Options{NodeName: "metric-names", Registry: reg}); err != nil {
		t.Fatalf("building an agent: %v", err)
	}
	return daemon{binary: "agent", registry: reg, register: reg, libraries: []string{"go_", "process_"}}
}
