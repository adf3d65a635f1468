// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's Prometheus series. No per-network or per-pod
// labels: their cardinality is unbounded.
type metrics struct {
	requests     *prometheus.CounterVec   // command, result
	latency      *prometheus.HistogramVec // command
	allocations  prometheus.Counter
	failures     *prometheus.CounterVec // reason
	conflicts    prometheus.Counter
	stickyBack   prometheus.Counter
	blocksTaken  prometheus.Counter
	releases     *prometheus.CounterVec   // verb
	apiWrites    *prometheus.CounterVec   // verb
	writeLatency *prometheus.HistogramVec // verb; reservation writes only
	apiReads     *prometheus.CounterVec   // verb
	podLookups   *prometheus.CounterVec   // source
	reservations prometheus.GaugeFunc
	ready        prometheus.GaugeFunc
}

// newMetrics registers the agent's metrics on reg; indexLen and ready are
// read at each scrape.
func newMetrics(reg prometheus.Registerer, indexLen func() int, ready func() bool) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_agent_cni_requests_total", Help: "CNI requests served, by command and result (success or error).",
		}, []string{"command", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ipkeeper_agent_cni_request_duration_seconds",
			Help:    "Time to serve a CNI request, by command.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"command"}),
		allocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_agent_addresses_allocated_total", Help: "Addresses reserved by this agent.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_agent_allocation_failures_total", Help: "ADDs that failed, by reason (exhausted, conflict, invalid, pod, internal).",
		}, []string{"reason"}),
		stickyBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_agent_sticky_mac_taken_back_total", Help: "Addresses a pod of a sticky_mac network got back that a pod of its namespace released with the same MAC.",
		}),
		blocksTaken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_agent_blocks_taken_total", Help: "Address blocks (IPBlocks) this agent took for its node.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipkeeper_agent_allocation_conflicts_total", Help: "Candidate addresses found already reserved at create time (another agent won).",
		}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_agent_reservations_released_total", Help: "Reservations released (deleted, or retired in a pool with a reuse cooldown), by verb (DEL, GC, rollback, ...; expired: a released one deleted once its cooldown was over).",
		}, []string{"verb"}),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_agent_api_writes_total", Help: "Writes to the API server, by verb.",
		}, []string{"verb"}),
		// The round trip of a reservation write, the part of an ADD or DEL
		// the agent waits for: a request's duration less this is the
		// agent's own work.
		writeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ipkeeper_agent_api_write_duration_seconds",
			Help:    "Time from sending a write of a reservation to the API server to its answer, by verb (create, update, patch, delete).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"verb"}),
		apiReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_agent_api_reads_total", Help: "Live reads of reservations from the API server, by verb (get, list: one per page).",
		}, []string{"verb"}),
		podLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipkeeper_agent_pod_lookups_total", Help: "Pod identity checks, by source (cache, or api when the cache had not seen the pod yet).",
		}, []string{"source"}),
		reservations: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ipkeeper_agent_reservations", Help: "Reservations in the agent's cache: its node's and the shared ones (ipkeeper.io/node=Shared), of all networks.",
		}, func() float64 { return float64(indexLen()) }),
		// Read at scrape time, like /readyz: an alert sees an agent that
		// never gets ready (a missing CRD, caches that do not sync).
		ready: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ipkeeper_agent_ready",
			Help: "1 while the agent serves CNI requests (its caches synced, its socket listening), 0 while it starts or waits for a CRD (see /readyz for why).",
		}, func() float64 {
			if ready() {
				return 1
			}
			return 0
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.allocations, m.failures, m.conflicts, m.stickyBack, m.blocksTaken, m.releases, m.apiWrites, m.writeLatency, m.apiReads, m.podLookups, m.reservations, m.ready} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// wrote records one reservation write, sent at start, in
// ipkeeper_agent_api_write_duration_seconds; use as
// defer s.metrics.wrote("create", time.Now()).
func (m *metrics) wrote(verb string, start time.Time) {
	m.writeLatency.WithLabelValues(verb).Observe(time.Since(start).Seconds())
}

// observe records one served CNI request; use as
// defer a.metrics.observe("ADD", time.Now(), &err).
func (m *metrics) observe(command string, start time.Time, err *error) {
	result := "success"
	if *err != nil {
		result = "error"
	}
	m.requests.WithLabelValues(command, result).Inc()
	m.latency.WithLabelValues(command).Observe(time.Since(start).Seconds())
}
