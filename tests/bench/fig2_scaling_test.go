// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// scalingNodes are the cluster sizes of figure 2; the first is the baseline.
var scalingNodes = []int{4, 16, 64}

// BenchmarkScaling (figure 2): the storm (2,000 ADDs, 32 in flight) with 4,
// 16 and 64 agent processes, each a simulated node watching every
// reservation as a real one does. Reports the rate, p50/p99, each agent's
// CPU seconds and memory, and the watch events the API server sent per
// allocation (the fan-out of every reservation to every agent).
func BenchmarkScaling(b *testing.B) {
	sizes, adds := scalingNodes, stormADDs
	if testing.Short() {
		sizes, adds = []int{2, 4}, 200
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var base float64
		for step, n := range sizes {
			rate := scalingStep(b, i*len(sizes)+step, n, adds)
			if n == sizes[0] {
				base = rate
				continue
			}
			record(row{fig: 2, what: fmt.Sprintf("rate at %d nodes vs %d", n, sizes[0]),
				measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s", base),
				ratio: fmt.Sprintf("%.2fx", rate/base), target: ">= 0.8x at 64", verdict: verdictIf(n == 64, rate/base >= 0.8)})
		}
	}
}

func verdictIf(applies, ok bool) string {
	if !applies {
		return ""
	}
	return verdict(ok)
}

// scalingStep runs one storm on n fresh agent processes and returns its rate.
// Each step has a network of its own, with a range of its own: inline
// networks that overlap are refused.
func scalingStep(b *testing.B, step, n, adds int) float64 {
	ctx := context.Background()
	ns := cp.NewNamespace(b, fmt.Sprintf("scale%d", n))
	nodes, stop := startNodes(b, fmt.Sprintf("scale%d-node", n), n)
	defer stop()
	pods, owner := createPodsOn(b, ns, nodes, (adds+n-1)/n)
	pods, owner = pods[:adds], owner[:adds]
	conf := framework.NetConf(fmt.Sprintf("scale%d-%d", n, step), map[string]any{"range": fmt.Sprintf("10.129.%d.0/20", 16*step)})
	cp.InlinePool(b, ns, conf) // no ipkeeper-controller here: the pool it makes from the NAD

	// The API server's own rate now, with n agents watching: it shows how
	// much of a change is the API server's.
	raw := rawCreateRate(b, ns, fmt.Sprintf("scale%d", n), adds/2, stormInFlight)

	apiBefore := apiMetrics(b)
	statBefore := make([]procStat, n)
	for k, nd := range nodes {
		statBefore[k] = nd.stat(b)
	}
	latencies := make([]time.Duration, len(pods))
	var failed atomic.Int64
	m := startCPU(b)
	b.StartTimer()
	start := time.Now()
	runConcurrently(len(pods), stormInFlight, func(k int) {
		t0 := time.Now()
		if err := owner[k].add(ctx, pods[k], framework.SandboxID(pods[k]), conf); err != nil {
			if failed.Add(1) <= 3 {
				b.Errorf("ADD %s on %s: %v", pods[k].Name, owner[k].name, err)
			}
		}
		latencies[k] = time.Since(t0)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		// A rate of failed ADDs measures nothing.
		b.Fatalf("%d nodes: %d of %d ADDs failed", n, f, len(pods))
	}
	cpAPI, cpEtcd := m.perOp(b, len(pods))
	apiAfter := apiMetrics(b)

	var cpu, maxCPU time.Duration
	var rss, heap, maxHeap float64
	for k, nd := range nodes {
		st := nd.stat(b)
		d := st.cpu - statBefore[k].cpu
		cpu += d
		maxCPU = max(maxCPU, d)
		rss += st.rss
		h := sum(nd.scrape(b), "go_memstats_heap_alloc_bytes")
		heap += h
		maxHeap = max(maxHeap, h)
	}
	allocs := float64(len(pods))
	watch := sum(apiAfter, "apiserver_watch_events_total") - sum(apiBefore, "apiserver_watch_events_total")
	watchRes := sum(apiAfter, "apiserver_watch_events_total", "resource", "ipreservations") -
		sum(apiBefore, "apiserver_watch_events_total", "resource", "ipreservations")
	slices.Sort(latencies)
	rate := allocs / elapsed.Seconds()
	p50, p99 := ms(percentile(latencies, 50)), ms(percentile(latencies, 99))
	fn := float64(n)

	b.Logf("%d nodes: %d ADDs, %d failed, %.0f allocations/s (raw ConfigMap creates %.0f/s, ratio %.2f), p50 %.1f ms, p99 %.1f ms; "+
		"agent CPU %.2f s in all (%.3f s mean, %.3f s max per agent, %.2f ms per allocation); "+
		"kube-apiserver %.2f ms and etcd %.2f ms CPU per allocation; per agent heap %.1f MiB mean (%.1f max), RSS %.1f MiB mean; watch events sent %.0f (%.1f per allocation, %.1f of them reservations)",
		n, len(pods), failed.Load(), rate, raw, rate/raw, p50, p99,
		cpu.Seconds(), cpu.Seconds()/fn, maxCPU.Seconds(), float64(cpu.Milliseconds())/allocs,
		cpAPI, cpEtcd, mib(heap/fn), mib(maxHeap), mib(rss/fn), watch, watch/allocs, watchRes/allocs)
	b.ReportMetric(rate, fmt.Sprintf("allocs/s@%d", n))
	record(row{fig: 2, what: fmt.Sprintf("%d nodes: rate, p50/p99", n),
		measured: fmt.Sprintf("%.0f/s, %.1f/%.1f ms", rate, p50, p99), baseline: fmt.Sprintf("%.0f/s raw ConfigMap creates", raw),
		ratio: fmt.Sprintf("%.2fx", rate/raw), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%d nodes: agent CPU per allocation (all agents)", n),
		measured: fmt.Sprintf("%.2f ms (%.2f s mean/agent)", float64(cpu.Microseconds())/1000/allocs, cpu.Seconds()/fn), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%d nodes: kube-apiserver / etcd CPU per allocation", n),
		measured: fmt.Sprintf("%.2f / %.2f ms", cpAPI, cpEtcd), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%d nodes: agent heap / RSS, mean", n),
		measured: fmt.Sprintf("%.1f / %.1f MiB", mib(heap/fn), mib(rss/fn)), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%d nodes: watch events sent per allocation", n),
		measured: fmt.Sprintf("%.1f (%.1f reservations)", watch/allocs, watchRes/allocs), baseline: fmt.Sprintf("%d agents", n),
		ratio: fmt.Sprintf("%.2f per agent", watchRes/allocs/fn), target: "reported; reduce if it grows", verdict: "reported"})
	return rate
}
