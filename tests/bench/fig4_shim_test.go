// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// BenchmarkShim (figure 4): what the exec'd shim costs. Its start-up (the
// CNI VERSION command, which needs no agent) against a minimal Go binary
// printing {} built in the same run with the same flags, execs interleaved;
// then sequential ADDs through the exec'd shim against the agent's own
// handling time (its request duration histogram) and against the same ADD
// sent straight to the agent's socket.
func BenchmarkShim(b *testing.B) {
	execs, adds := 300, 200
	if testing.Short() {
		execs, adds = 30, 20
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bin := binaries(b)
		ctx := context.Background()
		version := []byte(`{"cniVersion":"1.1.0"}`)
		var shimT, minT []time.Duration
		for range execs {
			t0 := time.Now()
			if _, err := execPlugin(ctx, bin.Shim, "VERSION", "", nil, version); err != nil {
				b.Fatal(err)
			}
			shimT = append(shimT, time.Since(t0))
			t0 = time.Now()
			if _, err := execPlugin(ctx, minimal, "VERSION", "", nil, version); err != nil {
				b.Fatal(err)
			}
			minT = append(minT, time.Since(t0))
		}
		slices.Sort(shimT)
		slices.Sort(minT)
		shim50, min50 := percentile(shimT, 50), percentile(minT, 50)
		ratio := float64(shim50) / float64(min50)
		b.Logf("exec: shim VERSION p50 %.2f ms (p90 %.2f), minimal Go binary p50 %.2f ms (p90 %.2f): %.2fx",
			ms(shim50), ms(percentile(shimT, 90)), ms(min50), ms(percentile(minT, 90)), ratio)
		record(row{fig: 4, what: "shim exec (VERSION), p50",
			measured: fmt.Sprintf("%.2f ms", ms(shim50)), baseline: fmt.Sprintf("%.2f ms minimal Go binary", ms(min50)),
			ratio: fmt.Sprintf("%.2fx", ratio), target: "<= 1.3x", verdict: verdict(ratio <= 1.3)})

		nodes, stop := startNodes(b, "shim-node", 1)
		nd := nodes[0]
		ns := cp.NewNamespace(b, "shim")
		pods := cp.CreatePods(b, ns, nd.name, nd.name, 2*adds)
		ipam := map[string]any{"range": "10.131.0.0/20"}
		conf := framework.NetConf(fmt.Sprintf("shim-%d", i), ipam)
		cp.InlinePool(b, ns, conf) // no ipkeeper-controller here: the pool it makes from the NAD
		// Warm the agent's paths (first allocation on a network, first pods).
		for _, p := range pods[:5] {
			if err := nd.add(ctx, p, framework.SandboxID(p), conf); err != nil {
				b.Fatal(err)
			}
		}
		pods = pods[5:]

		before := nd.scrape(b)
		var execT []time.Duration
		b.StartTimer()
		for _, p := range pods[:adds] {
			t0 := time.Now()
			if _, err := execPlugin(ctx, bin.Shim, "ADD", nd.proc.Socket, p, conf); err != nil {
				b.Fatal(err)
			}
			execT = append(execT, time.Since(t0))
		}
		b.StopTimer()
		after := nd.scrape(b)
		var directT []time.Duration
		for _, p := range pods[adds : 2*adds-5] {
			t0 := time.Now()
			if err := nd.add(ctx, p, framework.SandboxID(p), conf); err != nil {
				b.Fatal(err)
			}
			directT = append(directT, time.Since(t0))
		}
		stop()
		// Most of an ADD is its one create, which no agent can avoid: the
		// same create, sequential, straight to the API server.
		var createT []time.Duration
		for k := range adds {
			t0 := time.Now()
			createReservation(b, fmt.Sprintf("shim-raw-%d", i), netip.AddrFrom4([4]byte{10, 136, byte(k >> 8), byte(k)}), k)
			createT = append(createT, time.Since(t0))
		}
		// The raw creates above run back to back and their objects are
		// smaller; the agent's create is the full reservation and comes
		// after a process start, when the client, API server and etcd
		// have gone idle. The same create paced like that (an exec of the
		// minimal binary before each) is what the agent's handling cannot
		// go below.
		var pacedT []time.Duration
		for k, p := range pods[:adds] {
			if _, err := execPlugin(ctx, minimal, "VERSION", "", nil, version); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			createAgentsReservation(b, fmt.Sprintf("shim-paced-%d", i), netip.AddrFrom4([4]byte{10, 137, byte(k >> 8), byte(k)}), p, nd.name)
			pacedT = append(pacedT, time.Since(t0))
		}

		bb, nb, sb := histogram(before, "ipkeeper_agent_cni_request_duration_seconds", "command", "ADD")
		ba, na, sa := histogram(after, "ipkeeper_agent_cni_request_duration_seconds", "command", "ADD")
		count := float64(na - nb)
		agentMean := time.Duration((sa - sb) / count * float64(time.Second))
		agentP50 := time.Duration(bucketQuantile(0.5, bb, ba) * float64(time.Second))
		pacedMean := mean(pacedT)
		requests := func(name string) float64 { return (sum(after, name) - sum(before, name)) / count }
		slices.Sort(execT)
		slices.Sort(directT)
		slices.Sort(createT)
		slices.Sort(pacedT)
		exec50, direct50, create50, paced50 := percentile(execT, 50), percentile(directT, 50), percentile(createT, 50), percentile(pacedT, 50)
		b.Logf("sequential ADD: exec'd shim p50 %.2f ms (p99 %.2f); straight to the socket p50 %.2f ms; a raw IPReservation create p50 %.2f ms (the agent's create, paced as the exec'd ADDs: %.2f ms); agent handling mean %.2f ms, p50 ~%.2f ms (from histogram buckets), over %.0f ADDs",
			ms(exec50), ms(percentile(execT, 99)), ms(direct50), ms(create50), ms(paced50), ms(agentMean), ms(agentP50), count)
		record(row{fig: 4, what: "sequential ADD, exec'd shim, p50",
			measured: fmt.Sprintf("%.2f ms", ms(exec50)), baseline: fmt.Sprintf("%.2f ms agent handling (mean)", ms(agentMean)),
			ratio: fmt.Sprintf("%.2fx", float64(exec50)/float64(agentMean)), target: "(context)"})
		b.Logf("sequential ADD: the same create paced as the ADDs: mean %.2f ms, p50 %.2f ms; the agent's API requests per ADD: writes %.2f, reads %.2f, pod lookups from the API %.2f (from its cache %.2f)",
			ms(pacedMean), ms(paced50), requests("ipkeeper_agent_api_writes_total"), requests("ipkeeper_agent_api_reads_total"),
			(sum(after, "ipkeeper_agent_pod_lookups_total", "source", "api")-sum(before, "ipkeeper_agent_pod_lookups_total", "source", "api"))/count,
			(sum(after, "ipkeeper_agent_pod_lookups_total", "source", "cache")-sum(before, "ipkeeper_agent_pod_lookups_total", "source", "cache"))/count)
		record(row{fig: 4, what: "sequential ADD, agent handling",
			measured: fmt.Sprintf("mean %.2f ms, p50 ~%.2f ms", ms(agentMean), ms(agentP50)),
			baseline: fmt.Sprintf("%.2f ms p50 raw IPReservation create, back to back", ms(create50)),
			ratio:    fmt.Sprintf("%.2fx", float64(agentP50)/float64(create50)), target: "(context)"})
		record(row{fig: 4, what: "sequential ADD, agent handling over its create (means)",
			measured: fmt.Sprintf("mean %.2f ms (%.2f writes, %.2f reads per ADD)", ms(agentMean), requests("ipkeeper_agent_api_writes_total"), requests("ipkeeper_agent_api_reads_total")),
			baseline: fmt.Sprintf("mean %.2f ms the same create, paced as the ADDs", ms(pacedMean)),
			ratio:    fmt.Sprintf("%.2fx", float64(agentMean)/float64(pacedMean)), target: "<= 1.2x", verdict: verdict(float64(agentMean) <= 1.2*float64(pacedMean))})
		record(row{fig: 4, what: "sequential ADD, agent handling over its create (p50)",
			measured: fmt.Sprintf("p50 ~%.2f ms (from histogram buckets)", ms(agentP50)),
			baseline: fmt.Sprintf("%.2f ms p50 the same create, paced as the ADDs", ms(paced50)),
			ratio:    fmt.Sprintf("%.2fx", float64(agentP50)/float64(paced50)), target: "(context)"})
	}
}

// mean is the mean of d.
func mean(d []time.Duration) time.Duration {
	var total time.Duration
	for _, x := range d {
		total += x
	}
	return total / time.Duration(max(len(d), 1))
}
