// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

const (
	stormAgents   = 4
	stormADDs     = 2000
	stormInFlight = 32
)

// BenchmarkAllocationStorm (figure 1): 2,000 ADDs through 4 in-process
// agents (4 simulated nodes, reached through their sockets), 32 in flight,
// on one network. Reported against the raw rate of creating
// tiny objects (ConfigMaps) with the same concurrency on the same API
// server, measured just before and just after the storm.
func BenchmarkAllocationStorm(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx := context.Background()
		ns := cp.NewNamespace(b, "storm")
		network := fmt.Sprintf("storm-%d", i)
		conf := framework.NetConf(network, map[string]any{"range": "10.128.0.0/20"})
		cp.InlinePool(b, ns, conf) // no ipkeeper-controller here: the pool it makes from the NAD
		agents := make([]*framework.Agent, stormAgents)
		type job struct {
			a   *framework.Agent
			pod *corev1.Pod
		}
		pods := make([][]*corev1.Pod, stormAgents)
		for n := range agents {
			agents[n] = cp.StartAgent(b, fmt.Sprintf("storm-node-%d", n))
			pods[n] = cp.CreatePods(b, ns, agents[n].Node, agents[n].Node, stormADDs/stormAgents)
		}
		// Round-robin over nodes so all agents work at once.
		var jobs []job
		for k := range stormADDs / stormAgents {
			for n := range agents {
				jobs = append(jobs, job{agents[n], pods[n][k]})
			}
		}

		// Warm the API server's paths (first requests of a kind are slower).
		rawCreateRate(b, ns, "warmup", stormADDs/4, stormInFlight)
		m := startCPU(b)
		profiled := profileAPIServer(b, "raw-configmaps")
		before := rawCreateRate(b, ns, "before", stormADDs, stormInFlight)
		cmAPI, cmEtcd := m.perOp(b, stormADDs)
		profiled()
		m = startCPU(b)
		profiled = profileAPIServer(b, "raw-ipreservations")
		rawRes := rawReservationRate(b, fmt.Sprintf("raw-%d", i), stormADDs, stormInFlight)
		resAPI, resEtcd := m.perOp(b, stormADDs)
		profiled()

		latencies := make([]time.Duration, len(jobs))
		var failed atomic.Int64
		m = startCPU(b)
		profiled = profileAPIServer(b, "storm")
		b.StartTimer()
		start := time.Now()
		runConcurrently(len(jobs), stormInFlight, func(k int) {
			t0 := time.Now()
			if _, err := jobs[k].a.Add(ctx, jobs[k].pod, "net1", conf); err != nil {
				failed.Add(1)
				b.Errorf("ADD %s: %v", jobs[k].pod.Name, err)
			}
			latencies[k] = time.Since(t0)
		})
		elapsed := time.Since(start)
		b.StopTimer()
		stormAPI, stormEtcd := m.perOp(b, len(jobs))
		profiled()

		after := rawCreateRate(b, ns, "after", stormADDs, stormInFlight)
		var writes, conflicts, apiLookups float64
		for _, a := range agents {
			writes += a.CounterSum("ipkeeper_agent_api_writes_total")
			conflicts += a.CounterSum("ipkeeper_agent_allocation_conflicts_total")
			apiLookups += a.CounterWhere("ipkeeper_agent_pod_lookups_total", "source", "api")
		}
		slices.Sort(latencies)
		rate := float64(len(jobs)) / elapsed.Seconds()
		raw := (before + after) / 2
		b.ReportMetric(rate, "allocs/s")
		b.ReportMetric(raw, "raw-creates/s")
		b.ReportMetric(rate/raw, "ratio")
		b.ReportMetric(rawRes, "raw-reservations/s")
		b.ReportMetric(rate/rawRes, "ratio-to-reservations")
		b.ReportMetric(ms(latencies[len(latencies)/2]), "p50-ms")
		b.ReportMetric(ms(latencies[len(latencies)*99/100]), "p99-ms")
		b.ReportMetric(writes/float64(len(jobs)), "writes/alloc")
		b.ReportMetric(conflicts, "conflicts")
		b.ReportMetric(apiLookups/float64(len(jobs)), "pod-api-reads/alloc")
		record(row{fig: 1, what: "storm rate (2,000 ADDs, 4 agents, 32 in flight)",
			measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s raw ConfigMap creates", raw),
			ratio: fmt.Sprintf("%.2fx", rate/raw), target: ">= 0.5x", verdict: verdict(rate/raw >= 0.5)})
		record(row{fig: 1, what: "storm rate vs the objects themselves",
			measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s raw IPReservation creates", rawRes),
			ratio: fmt.Sprintf("%.2fx", rate/rawRes), target: "(context)"})
		record(row{fig: 1, what: "raw IPReservation vs raw ConfigMap creates",
			measured: fmt.Sprintf("%.0f/s", rawRes), baseline: fmt.Sprintf("%.0f/s", raw),
			ratio: fmt.Sprintf("%.2fx", rawRes/raw), target: "(context)"})
		record(row{fig: 1, what: "kube-apiserver CPU per storm ADD (per raw IPReservation create)",
			measured: fmt.Sprintf("%.2f ms (%.2f ms)", stormAPI, resAPI), baseline: fmt.Sprintf("%.2f ms per raw ConfigMap create", cmAPI),
			ratio: fmt.Sprintf("%.1fx (%.1fx)", stormAPI/cmAPI, resAPI/cmAPI), target: "(context)"})
		record(row{fig: 1, what: "etcd CPU per storm ADD (per raw IPReservation create)",
			measured: fmt.Sprintf("%.2f ms (%.2f ms)", stormEtcd, resEtcd), baseline: fmt.Sprintf("%.2f ms per raw ConfigMap create", cmEtcd),
			ratio: fmt.Sprintf("%.1fx (%.1fx)", stormEtcd/cmEtcd, resEtcd/cmEtcd), target: "(context)"})
		record(row{fig: 1, what: "storm latency p50 / p99",
			measured: fmt.Sprintf("%.1f / %.1f ms", ms(latencies[len(latencies)/2]), ms(latencies[len(latencies)*99/100])), target: "(context)"})
		b.Logf("%d ADDs via %d agents, %d in flight: %.0f allocations/s (p50 %.1f ms, p99 %.1f ms, %.2f API writes/allocation, %v conflicts, %d failed); "+
			"raw API server create rate %.0f/s (before %.0f, after %.0f); ratio %.2f; "+
			"raw IPReservation creates (same objects, no agent in the path, agents watching) %.0f/s; ratio %.2f; pod reads that missed the cache: %.0f",
			len(jobs), stormAgents, stormInFlight, rate, ms(latencies[len(latencies)/2]), ms(latencies[len(latencies)*99/100]),
			writes/float64(len(jobs)), conflicts, failed.Load(), raw, before, after, rate/raw, rawRes, rate/rawRes, apiLookups)
	}
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
func rawReservationRate(b *testing.B, network string, n, inFlight int) float64 {
	start := time.Now()
	runConcurrently(n, inFlight, func(k int) {
		createReservation(b, network, netip.AddrFrom4([4]byte{10, 200, byte(k >> 8), byte(k)}), k)
	})
	return float64(n) / time.Since(start).Seconds()
}

// createReservation creates one IPReservation as an agent would, straight
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

// createPodReservation creates, straight to the API server, the
// reservation the agent would create for pod's net1 on node: the same
// object, labels included.
func createPodReservation(b *testing.B, network string, ip netip.Addr, p *corev1.Pod, node string) {
	r := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(network, ip), Labels: map[string]string{
			naming.NetworkLabel: naming.NetworkLabelValue(network), naming.OwnerKindLabel: string(ipkeeperv1alpha1.OwnerPod),
		}},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Pool: network, Network: network, IP: ip.String(), InterfaceName: "net1",
			ContainerID: framework.SandboxID(p), Node: node,
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: p.UID}},
	}
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
