// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

const (
	stormAgents   = 4
	stormADDs     = 2000
	stormInFlight = 32
)

// BenchmarkAllocationStorm (figure 1): 2,000 ADDs through 4 agent
// processes (4 simulated nodes, each a real ipkeeper-agent reached through
// its socket, as a node's shim reaches it), 32 in flight, on one network.
// Reported against the raw rate of creating tiny objects (ConfigMaps) with
// the same concurrency on the same API server, measured just before and
// just after the storm, and against raw creates of the same IPReservations.
func BenchmarkAllocationStorm(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns, conf := stormNetwork(b, fmt.Sprintf("storm-%d", i), "10.128.0.0/20")
		nodes, stop := startNodes(b, fmt.Sprintf("storm%d-node", i), stormAgents)
		pods, owner := createPodsOn(b, ns, nodes, stormADDs/stormAgents)
		add := func(ctx context.Context, k int) error {
			return owner[k].add(ctx, pods[k], framework.SandboxID(pods[k]), conf)
		}
		counters := func() (c stormCounters) {
			for _, nd := range nodes {
				mfs := nd.scrape(b)
				c.writes += sum(mfs, "ipkeeper_agent_api_writes_total")
				c.conflicts += sum(mfs, "ipkeeper_agent_allocation_conflicts_total")
				c.apiLookups += sum(mfs, "ipkeeper_agent_pod_lookups_total", "source", "api")
			}
			return c
		}
		same := func(k int) (*corev1.Pod, string) { return pods[k], owner[k].name }
		storm(b, i, ns, len(pods), add, same, counters, true)
		stop()
	}
}

// BenchmarkInProcessAllocationStorm is figure 1 with the agents inside the
// test process, so that `-cpuprofile` covers them: for profiling only. Its
// figures are not the table's (no client throttling, logs discarded: it runs
// faster than agents as a node runs them), so it records no row and runs
// only when IPKEEPER_BENCH_IN_PROCESS=1:
//
//	IPKEEPER_BENCH_IN_PROCESS=1 go test -run '^$' -bench InProcess -benchtime=1x -cpuprofile cpu.out ./tests/bench/
func BenchmarkInProcessAllocationStorm(b *testing.B) {
	if os.Getenv("IPKEEPER_BENCH_IN_PROCESS") != "1" {
		b.Skip("for profiling only: set IPKEEPER_BENCH_IN_PROCESS=1")
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns, conf := stormNetwork(b, fmt.Sprintf("inproc-storm-%d", i), "10.136.0.0/20")
		agents := make([]*framework.Agent, stormAgents)
		byNode := make([][]*corev1.Pod, stormAgents)
		for n := range agents {
			agents[n] = cp.StartAgent(b, fmt.Sprintf("inproc%d-node-%d", i, n))
			byNode[n] = cp.CreatePods(b, ns, agents[n].Node, agents[n].Node, stormADDs/stormAgents)
		}
		// Round-robin over nodes so all agents work at once.
		var pods []*corev1.Pod
		var owner []*framework.Agent
		for k := range stormADDs / stormAgents {
			for n := range agents {
				pods, owner = append(pods, byNode[n][k]), append(owner, agents[n])
			}
		}
		add := func(ctx context.Context, k int) error {
			_, err := owner[k].Add(ctx, pods[k], "net1", conf)
			return err
		}
		counters := func() (c stormCounters) {
			for _, a := range agents {
				c.writes += a.CounterSum("ipkeeper_agent_api_writes_total")
				c.conflicts += a.CounterSum("ipkeeper_agent_allocation_conflicts_total")
				c.apiLookups += a.CounterWhere("ipkeeper_agent_pod_lookups_total", "source", "api")
			}
			return c
		}
		same := func(k int) (*corev1.Pod, string) { return pods[k], owner[k].Node }
		storm(b, i, ns, len(pods), add, same, counters, false)
	}
}

// stormNetwork makes the storm's namespace and network, with the pool
// ipkeeper-controller would make from its NAD (no controller runs here).
func stormNetwork(b *testing.B, network, rng string) (string, json.RawMessage) {
	ns := cp.NewNamespace(b, "storm")
	conf := framework.NetConf(network, map[string]any{"range": rng})
	cp.InlinePool(b, ns, conf)
	return ns, conf
}

// stormCounters are the agents' own counts, summed over the agents.
type stormCounters struct{ writes, conflicts, apiLookups float64 }

// storm measures the baselines, runs n ADDs (add(k), stormInFlight at a
// time) and reports; table says whether its figures are the table's.
// same(k) is the pod of the k-th ADD and its node: the baseline of raw
// creates of the same objects makes the reservation the agent makes for it.
func storm(b *testing.B, i int, ns string, n int, add func(context.Context, int) error, same func(k int) (*corev1.Pod, string), counters func() stormCounters, table bool) {
	ctx := context.Background()
	// Warm the API server's paths (first requests of a kind are slower).
	rawCreateRate(b, ns, "warmup", stormADDs/4, stormInFlight)
	m := startCPU(b)
	profiled := profileAPIServer(b, "raw-configmaps")
	before := rawCreateRate(b, ns, "before", stormADDs, stormInFlight)
	cmAPI, cmEtcd := m.perOp(b, stormADDs)
	profiled()
	m = startCPU(b)
	profiled = profileAPIServer(b, "raw-ipreservations")
	rawRes := rawReservationRate(b, fmt.Sprintf("raw-%s-%d", ns, i), stormADDs, stormInFlight)
	resAPI, resEtcd := m.perOp(b, stormADDs)
	profiled()
	m = startCPU(b)
	profiled = profileAPIServer(b, "raw-same-ipreservations")
	rawSame := rawSameRate(b, fmt.Sprintf("same-%s-%d", ns, i), n, stormInFlight, same)
	sameAPI, sameEtcd := m.perOp(b, n)
	profiled()

	latencies := make([]time.Duration, n)
	var failed atomic.Int64
	m = startCPU(b)
	profiled = profileAPIServer(b, "storm")
	b.StartTimer()
	start := time.Now()
	runConcurrently(n, stormInFlight, func(k int) {
		t0 := time.Now()
		if err := add(ctx, k); err != nil {
			if failed.Add(1) <= 3 {
				b.Errorf("ADD %d: %v", k, err)
			}
		}
		latencies[k] = time.Since(t0)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d ADDs failed: a rate of failed ADDs measures nothing", f, n)
	}
	stormAPI, stormEtcd := m.perOp(b, n)
	profiled()

	after := rawCreateRate(b, ns, "after", stormADDs, stormInFlight)
	c := counters()
	slices.Sort(latencies)
	rate := float64(n) / elapsed.Seconds()
	raw := (before + after) / 2
	p50, p99 := ms(latencies[len(latencies)/2]), ms(latencies[len(latencies)*99/100])
	agents := "agent processes"
	if !table {
		agents = "in-process agents (profiling only, not the table's)"
	}
	b.ReportMetric(rate, "allocs/s")
	b.ReportMetric(raw, "raw-creates/s")
	b.ReportMetric(rate/raw, "ratio")
	b.ReportMetric(rawRes, "raw-reservations/s")
	b.ReportMetric(rate/rawRes, "ratio-to-reservations")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(c.writes/float64(n), "writes/alloc")
	b.ReportMetric(c.conflicts, "conflicts")
	b.ReportMetric(c.apiLookups/float64(n), "pod-api-reads/alloc")
	b.Logf("%d ADDs via %d %s, %d in flight: %.0f allocations/s (p50 %.1f ms, p99 %.1f ms, %.2f API writes/allocation, %v conflicts); "+
		"raw API server create rate %.0f/s (before %.0f, after %.0f); ratio %.2f; "+
		"raw creates of the same objects (the agents' reservations, each sent to its node's agent) %.0f/s; ratio %.2f; "+
		"raw bare IPReservation creates (no labels, no watcher) %.0f/s; ratio %.2f; pod reads that missed the cache: %.0f",
		n, stormAgents, agents, stormInFlight, rate, p50, p99, c.writes/float64(n), c.conflicts,
		raw, before, after, rate/raw, rawSame, rate/rawSame, rawRes, rate/rawRes, c.apiLookups)
	if !table {
		return
	}
	record(row{fig: 1, what: "storm rate (2,000 ADDs, 4 agent processes, 32 in flight)",
		measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s raw ConfigMap creates", raw),
		ratio: fmt.Sprintf("%.2fx", rate/raw), target: "(context: the object's own ceiling is the next rows')"})
	record(row{fig: 1, what: "storm rate vs raw creates of the same objects",
		measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s the agents' reservations, created straight", rawSame),
		ratio: fmt.Sprintf("%.2fx", rate/rawSame), target: ">= 0.8x", verdict: verdict(rate/rawSame >= 0.8)})
	record(row{fig: 1, what: "storm rate vs raw bare IPReservation creates",
		measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s bare reservations (no labels, no watcher)", rawRes),
		ratio: fmt.Sprintf("%.2fx", rate/rawRes), target: "(context)"})
	record(row{fig: 1, what: "kube-apiserver / etcd CPU per raw create of the same objects",
		measured: fmt.Sprintf("%.2f / %.2f ms", sameAPI, sameEtcd), baseline: fmt.Sprintf("%.2f / %.2f ms per storm ADD", stormAPI, stormEtcd),
		ratio: fmt.Sprintf("%.2fx", (stormAPI+stormEtcd)/(sameAPI+sameEtcd)), target: "(context)"})
	record(row{fig: 1, what: "raw IPReservation vs raw ConfigMap creates",
		measured: fmt.Sprintf("%.0f/s", rawRes), baseline: fmt.Sprintf("%.0f/s", raw),
		ratio: fmt.Sprintf("%.2fx", rawRes/raw), target: "(context)"})
	record(row{fig: 1, what: "kube-apiserver CPU per storm ADD (per raw IPReservation create)",
		measured: fmt.Sprintf("%.2f ms (%.2f ms)", stormAPI, resAPI), baseline: fmt.Sprintf("%.2f ms per raw ConfigMap create", cmAPI),
		ratio: fmt.Sprintf("%.1fx (%.1fx)", stormAPI/cmAPI, resAPI/cmAPI), target: "(context)"})
	record(row{fig: 1, what: "etcd CPU per storm ADD (per raw IPReservation create)",
		measured: fmt.Sprintf("%.2f ms (%.2f ms)", stormEtcd, resEtcd), baseline: fmt.Sprintf("%.2f ms per raw ConfigMap create", cmEtcd),
		ratio: fmt.Sprintf("%.1fx (%.1fx)", stormEtcd/cmEtcd, resEtcd/cmEtcd), target: "(context)"})
	record(row{fig: 1, what: "storm latency p50 / p99", measured: fmt.Sprintf("%.1f / %.1f ms", p50, p99), target: "(context)"})
}

// rawCreateRate creates n ConfigMaps with the given concurrency and returns creates/s.
func rawCreateRate(b *testing.B, ns, tag string, n, inFlight int) float64 {
	start := time.Now()
	runConcurrently(n, inFlight, func(k int) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw-%s-%d", tag, k), Namespace: ns}}
		if err := cp.Client.Create(context.Background(), cm); err != nil {
			b.Errorf("raw create: %v", err)
		}
	})
	return float64(n) / time.Since(start).Seconds()
}

// rawReservationRate creates n IPReservations directly (no agent, no
// informers) and returns creates/s: the cost of the object itself (a CRD
// with CEL validation, JSON only), separate from the agent's overhead.
// Their owners never exist: they are deleted when the figure ends, so that
// no later figure's garbage collector works through them.
func rawReservationRate(b *testing.B, network string, n, inFlight int) float64 {
	ip := func(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 200, byte(k >> 8), byte(k)}) }
	start := time.Now()
	runConcurrently(n, inFlight, func(k int) {
		createReservation(b, network, ip(k), k)
	})
	rate := float64(n) / time.Since(start).Seconds()
	deleteAtEnd(b, network, n, inFlight, ip)
	return rate
}

// rawSameRate creates, straight to the API server, the reservation the
// agent makes for each of n ADDs (same(k): its pod and node), on network,
// n at inFlight at a time, and returns creates/s: labelled with the node,
// each is sent to that node's agent, as the storm's are. They are deleted
// when the figure ends.
func rawSameRate(b *testing.B, network string, n, inFlight int, same func(k int) (*corev1.Pod, string)) float64 {
	ip := func(k int) netip.Addr { return netip.AddrFrom4([4]byte{10, 201, byte(k >> 8), byte(k)}) }
	start := time.Now()
	runConcurrently(n, inFlight, func(k int) {
		p, node := same(k)
		createAgentsReservation(b, network, ip(k), p, node)
	})
	rate := float64(n) / time.Since(start).Seconds()
	deleteAtEnd(b, network, n, inFlight, ip)
	return rate
}

// deleteAtEnd deletes, when the figure ends, the reservations of ip(k)
// on network for k < n, inFlight at a time.
func deleteAtEnd(b *testing.B, network string, n, inFlight int, ip func(k int) netip.Addr) {
	b.Cleanup(func() {
		runConcurrently(n, inFlight, func(k int) {
			r := &ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(network, ip(k))}}
			if err := cp.Client.Delete(context.Background(), r); err != nil && !apierrors.IsNotFound(err) {
				b.Errorf("deleting raw reservation %s: %v", r.Name, err)
			}
		})
	})
}

// createReservation creates one bare IPReservation (no labels), straight
// through the API.
func createReservation(b *testing.B, network string, ip netip.Addr, k int) {
	r := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(network, ip)},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Network: network, Pool: network, IP: ip.String(),
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "bench", Name: fmt.Sprintf("c-%d", k), UID: "u"}},
	}
	if err := cp.Client.Create(context.Background(), r); err != nil {
		b.Errorf("raw reservation create: %v", err)
	}
}

// createAgentsReservation creates, straight to the API server, the
// reservation the agent creates for pod's net1 on node in its node's
// block: the same object (reservation.New), labels and attachment time
// included.
func createAgentsReservation(b *testing.B, network string, ip netip.Addr, p *corev1.Pod, node string) {
	r := reservation.New(reservation.Params{Pool: network, Key: network, Network: network, IP: ip, Interface: "net1",
		ContainerID: framework.SandboxID(p), Node: node, AttachedAt: &metav1.Time{Time: time.Now()}, Block: reservation.NodeBlock,
		Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: p.UID}})
	if err := cp.Client.Create(context.Background(), r); err != nil {
		b.Errorf("raw reservation create: %v", err)
	}
}

func runConcurrently(n, inFlight int, f func(int)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				f(k)
			}
		}()
	}
	wg.Wait()
}
