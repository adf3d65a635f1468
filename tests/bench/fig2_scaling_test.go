// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// scalingNodes are the cluster sizes of figure 2; the first is the baseline.
var scalingNodes = []int{4, 16, 64}

// BenchmarkScaling (figure 2): the storm (2,000 allocations, 32 in
// flight) with 4, 16 and 64 agent processes, each a simulated node
// watching what a real one does, and ipkeeper-controller running; every
// fifth allocation is a VM start (vmEvery): its IPAMClaim and then its
// launcher pod are created, the controller fills the claim, and the
// launcher's ADD gets the claim's address.
// Reports the rate, p50/p99 (and the VM starts'), each agent's and the
// controller's CPU, the agents' memory, and the watch events the API
// server sent per allocation.
func BenchmarkScaling(b *testing.B) {
	sizes, adds := scalingNodes, stormADDs
	if testing.Short() {
		sizes, adds = []int{2, 4}, 200
	}
	ctrl := startScalingController(b)
	defer ctrl.Stop()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var base float64
		for step, n := range sizes {
			rate := scalingStep(b, i*len(sizes)+step, n, scaleOpts{ctrl: ctrl, vms: true}, adds).rate
			if n == sizes[0] {
				base = rate
				continue
			}
			record(row{fig: 2, what: fmt.Sprintf("rate at %d nodes vs %d, VMs in the mix", n, sizes[0]),
				measured: fmt.Sprintf("%.0f/s", rate), baseline: fmt.Sprintf("%.0f/s", base),
				ratio: fmt.Sprintf("%.2fx", rate/base), target: ">= 0.9x at 64", verdict: verdictIf(n == 64, rate/base >= 0.9)})
		}
	}
}

// vmEvery: every vmEvery-th allocation of figure 2's storms is a VM start
// (20%).
const vmEvery = 5

// scaleOpts vary a storm of figure 2.
type scaleOpts struct {
	// watchers is how many watch-only nodes run beside the agents.
	watchers int
	// ctrl, when set, is the running ipkeeper-controller (it keeps the
	// pools' status, which every node's agent is sent).
	ctrl *framework.ControllerProcess
	// vms: every vmEvery-th allocation is a VM start (ctrl fills its
	// claim).
	vms bool
}

// startScalingController runs ipkeeper-controller for figure 2's VM
// starts, as figure 7 does: API client limits far above what this API
// server serves, no pod webhook (the launcher pods carry their claim
// references), and a garbage collector grace period longer than the
// figure.
func startScalingController(b *testing.B) *framework.ControllerProcess {
	b.Helper()
	const ns = "bench-ipkeeper"
	if err := cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	dir := filepath.Join(workDir, "scaling-controller")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	proc, err := framework.StartControllerProcess(framework.ControllerProcessOptions{
		Binary: binaries(b).Controller, Kubeconfig: cp.KubeconfigPath, Dir: dir, Namespace: ns,
		WebhookConfigName: "ipkeeper-bench-scaling", GCGracePeriod: time.Hour,
		ExtraArgs: []string{"--enable-webhook=false", "--log-level=info",
			"--kube-api-qps=" + strconv.Itoa(bootControllerQPS), "--kube-api-burst=" + strconv.Itoa(2*bootControllerQPS)},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := proc.WaitReady(context.Background(), 2*time.Minute); err != nil {
		proc.Stop()
		b.Fatal(err)
	}
	return proc
}

// simulatedNodes is the size of figure 2's largest cluster: 4 agent
// processes and the rest watch-only nodes.
const simulatedNodes = 1000

// BenchmarkSimulatedNodes (figure 2, continued): the storm on 4 agent
// processes alone, then on 4 fresh ones with 996 watch-only nodes beside
// them (watchOnlyNodes: exactly an agent's watches, checked against the
// real agents'), ipkeeper-controller running as in a cluster. What each
// node costs kube-apiserver and etcd per allocation is the difference.
func BenchmarkSimulatedNodes(b *testing.B) {
	agents, total, adds, rounds := 4, simulatedNodes, stormADDs, simulatedRounds
	if testing.Short() {
		agents, total, adds, rounds = 2, 40, 200, 1
	}
	for _, r := range watchOnlyResources() {
		if !slices.ContainsFunc(agentWatches("x"), func(w agentWatch) bool { return w.resource == r }) {
			b.Fatalf("IPKEEPER_BENCH_WATCH_ONLY_RESOURCES: %q is not a resource an agent watches", r)
		}
	}
	// ipkeeper-controller runs as in a cluster: each write of a pool's
	// status is sent to every node.
	ctrl := startScalingController(b)
	defer ctrl.Stop()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var ratios, perNode []float64
		var baseCPU, bigCPU, baseRate, bigRate float64 // summed over the rounds
		for r := range rounds {
			step := simulatedFirstStep + 2*(i*rounds+r)
			base := scalingStep(b, step, agents, scaleOpts{ctrl: ctrl}, adds)
			big := scalingStep(b, step+1, agents, scaleOpts{watchers: total - agents, ctrl: ctrl}, adds)
			ratio := (big.api + big.etcd) / (base.api + base.etcd)
			extra := 1000 * (big.api + big.etcd - base.api - base.etcd) / float64(total-agents)
			ratios, perNode = append(ratios, ratio), append(perNode, extra)
			baseCPU, bigCPU = baseCPU+base.api+base.etcd, bigCPU+big.api+big.etcd
			baseRate, bigRate = baseRate+base.rate, bigRate+big.rate
			b.Logf("round %d of %d: %d nodes (%d watch-only): kube-apiserver + etcd CPU per allocation %.2f ms against %.2f ms with %d agents alone (%.2fx, %.1f µs per extra node); rate %.0f/s against %.0f/s",
				r+1, rounds, total, total-agents, big.api+big.etcd, base.api+base.etcd, agents, ratio, extra, big.rate, base.rate)
		}
		med, n := median(ratios), float64(rounds)
		what, applies := fmt.Sprintf("%d nodes (%d watch-only)", total, total-agents), !testing.Short()
		if only := watchOnlyResources(); only != nil {
			// An analysis: the nodes hold fewer watches than an agent.
			what, applies = fmt.Sprintf("%d nodes (%d watch-only, watching %s only)", total, total-agents, strings.Join(only, ", ")), false
		}
		b.Logf("%s, %d rounds: median ratio %.2fx (%s); median %.1f µs per extra node; means %.2f against %.2f ms (%.2fx)",
			what, rounds, med, fmtRatios(ratios), median(perNode), bigCPU/n, baseCPU/n, bigCPU/baseCPU)
		record(row{fig: 2, what: fmt.Sprintf("%s: kube-apiserver + etcd CPU per allocation (median of %d rounds' ratios)", what, rounds),
			measured: fmt.Sprintf("%.2f ms (mean)", bigCPU/n), baseline: fmt.Sprintf("%.2f ms, %d agents alone (mean)", baseCPU/n, agents),
			ratio: fmt.Sprintf("%.2fx (%s)", med, fmtRatios(ratios)), target: "<= 1.5x", verdict: verdictIf(applies, med <= 1.5)})
		record(row{fig: 2, what: fmt.Sprintf("%s: CPU per extra node and allocation (median of the rounds)", what),
			measured: fmt.Sprintf("%.1f µs", median(perNode)), target: "(context)"})
		record(row{fig: 2, what: fmt.Sprintf("%s: rate (mean of the rounds)", what),
			measured: fmt.Sprintf("%.0f/s", bigRate/n), baseline: fmt.Sprintf("%.0f/s, %d agents alone", baseRate/n, agents),
			ratio: fmt.Sprintf("%.2fx", bigRate/baseRate), target: "(context)"})
	}
}

// simulatedRounds is how many pairs of storms (4 agents alone, then with
// the watch-only nodes) figure 2's 1,000 nodes measures; the figure is the
// median of the pairs' ratios. The API server's CPU per allocation moves
// by a fifth between single storms of a few seconds on this machine (the
// same code ranged from 1.04x to 1.83x in single pairs of one run), more
// than the target's margin.
const simulatedRounds = 5

// simulatedFirstStep is the first scalingStep number of the 1,000 nodes
// (BenchmarkScaling's steps come before it).
const simulatedFirstStep = 16

func verdictIf(applies, ok bool) string {
	if !applies {
		return ""
	}
	return verdict(ok)
}

// stepResult is what one storm of figure 2 measured.
type stepResult struct {
	rate          float64 // allocations per second
	api, etcd     float64 // CPU milliseconds per allocation
	watchPerAlloc float64 // watch events sent per allocation
}

// scalingStep runs one storm on n fresh agent processes and returns what
// it measured. Each step has networks of its own, with ranges of their
// own: inline networks that overlap are refused.
func scalingStep(b *testing.B, step, n int, o scaleOpts, adds int) stepResult {
	ctx := context.Background()
	label := fmt.Sprintf("%d nodes", n)
	switch {
	case o.watchers > 0:
		label = fmt.Sprintf("%d nodes (%d agents, %d watch-only)", n+o.watchers, n, o.watchers)
	case o.vms:
		label = fmt.Sprintf("%d nodes, VMs in the mix", n)
	}
	ns := cp.NewNamespace(b, fmt.Sprintf("scale%d", n))
	// Runs last (after the agents and watch-only nodes stop): every step
	// starts on a cluster of the same size.
	var networks []string
	defer func() { removeStep(b, ns, networks) }()
	watchesBefore := openWatches(b)
	nodes, stop := startNodes(b, fmt.Sprintf("scale%d-%d-node", n, step), n)
	defer stop()
	if o.watchers > 0 {
		checkAgentWatches(b, watchesBefore, n)
		defer watchOnlyNodes(b, fmt.Sprintf("sim%d", step), o.watchers)()
	}
	pods, owner := createPodsOn(b, ns, nodes, (adds+n-1)/n)
	pods, owner = pods[:adds], owner[:adds]
	network := fmt.Sprintf("scale%d-%d", n, step)
	networks = append(networks, network)
	conf := framework.NetConf(network, map[string]any{"range": stepRange(step)})
	cp.InlinePool(b, ns, conf)
	var vmNet bootNet
	launchers := make([]*corev1.Pod, len(pods)) // by allocation; nil for a plain pod
	if o.ctrl != nil {
		// The controller makes (and keeps) inline pools from NADs.
		cp.CreateNAD(b, ns, network, conf)
	}
	if o.vms {
		vmNet = scalingVMNet(b, ns, step)
		networks = append(networks, vmNet.network)
		for k := 0; k < len(pods); k += vmEvery {
			launchers[k] = launcherPod(ns, scalingVM(step, k), "virt-launcher-"+scalingVM(step, k), owner[k].name, vmNet)
		}
	}

	// The API server's own rate now, with n agents watching: it shows how
	// much of a change is the API server's.
	raw := rawCreateRate(b, ns, fmt.Sprintf("scale%d", n), adds/2, stormInFlight)
	settleControlPlane(b)

	apiBefore := apiMetrics(b)
	statBefore := make([]procStat, n)
	for k, nd := range nodes {
		statBefore[k] = nd.stat(b)
	}
	var ctrlBefore procStat
	if o.ctrl != nil {
		ctrlBefore = processStat(b, o.ctrl.PID())
	}
	latencies := make([]time.Duration, len(pods))
	var failed atomic.Int64
	m := startCPU(b)
	profiled := profileAPIServer(b, fmt.Sprintf("scaling-%d-agents-%d-watch-only-step%d", n, o.watchers, step))
	b.StartTimer()
	start := time.Now()
	runConcurrently(len(pods), stormInFlight, func(k int) {
		t0 := time.Now()
		var err error
		if p := launchers[k]; p != nil {
			// A VM start, in KubeVirt's order: its claim is made, then
			// its launcher pod, whose ADD waits for the controller to
			// fill the claim. A plain pod's create is not timed.
			claim := vmClaim(ns, scalingVM(step, k), uuid.NewUUID(), vmNet.network)
			if err = cp.Client.Create(ctx, claim); err == nil {
				if err = cp.Client.Create(ctx, p); err == nil {
					err = owner[k].addAs(ctx, p, framework.SandboxID(p), bootIf, vmNet.conf())
				}
			}
		} else {
			err = owner[k].add(ctx, pods[k], framework.SandboxID(pods[k]), conf)
		}
		if err != nil && failed.Add(1) <= 3 {
			b.Errorf("allocation %d (pod %s) on %s: %v", k, pods[k].Name, owner[k].name, err)
		}
		latencies[k] = time.Since(t0)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		// A rate of failed ADDs measures nothing.
		b.Fatalf("%s: %d of %d ADDs failed", label, f, len(pods))
	}
	cpAPI, cpEtcd := m.perOp(b, len(pods))
	profiled()
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
	var vmLat []time.Duration
	for k, p := range launchers {
		if p != nil {
			vmLat = append(vmLat, latencies[k])
		}
	}
	slices.Sort(vmLat)
	slices.Sort(latencies)
	rate := allocs / elapsed.Seconds()
	p50, p99 := ms(percentile(latencies, 50)), ms(percentile(latencies, 99))
	fn := float64(n)

	b.Logf("%s: %d ADDs, %d failed, %.0f allocations/s (raw ConfigMap creates %.0f/s, ratio %.2f), p50 %.1f ms, p99 %.1f ms; "+
		"agent CPU %.2f s in all (%.3f s mean, %.3f s max per agent, %.2f ms per allocation); "+
		"kube-apiserver %.2f ms and etcd %.2f ms CPU per allocation; per agent heap %.1f MiB mean (%.1f max), RSS %.1f MiB mean; watch events sent %.0f (%.1f per allocation, %.1f of them reservations)",
		label, len(pods), failed.Load(), rate, raw, rate/raw, p50, p99,
		cpu.Seconds(), cpu.Seconds()/fn, maxCPU.Seconds(), float64(cpu.Milliseconds())/allocs,
		cpAPI, cpEtcd, mib(heap/fn), mib(maxHeap), mib(rss/fn), watch, watch/allocs, watchRes/allocs)
	b.ReportMetric(rate, fmt.Sprintf("allocs/s@%d", n+o.watchers))
	record(row{fig: 2, what: fmt.Sprintf("%s: rate, p50/p99", label),
		measured: fmt.Sprintf("%.0f/s, %.1f/%.1f ms", rate, p50, p99), baseline: fmt.Sprintf("%.0f/s raw ConfigMap creates", raw),
		ratio: fmt.Sprintf("%.2fx", rate/raw), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%s: agent CPU per allocation (all agents)", label),
		measured: fmt.Sprintf("%.2f ms (%.2f s mean/agent)", float64(cpu.Microseconds())/1000/allocs, cpu.Seconds()/fn), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%s: kube-apiserver / etcd CPU per allocation", label),
		measured: fmt.Sprintf("%.2f / %.2f ms", cpAPI, cpEtcd), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%s: agent heap / RSS, mean", label),
		measured: fmt.Sprintf("%.1f / %.1f MiB", mib(heap/fn), mib(rss/fn)), target: "(context)"})
	record(row{fig: 2, what: fmt.Sprintf("%s: watch events sent per allocation", label),
		measured: fmt.Sprintf("%.1f (%.1f reservations)", watch/allocs, watchRes/allocs), baseline: fmt.Sprintf("%d agents", n),
		ratio: fmt.Sprintf("%.2f per agent", watchRes/allocs/fn), target: "reported; reduce if it grows", verdict: "reported"})
	b.Logf("%s: watch events sent per allocation, by resource: %s", label, perResource(apiBefore, apiAfter, "apiserver_watch_events_total", allocs))
	if o.ctrl != nil && !o.vms {
		ctrlCPU := processStat(b, o.ctrl.PID()).cpu - ctrlBefore.cpu
		b.Logf("%s: ipkeeper-controller CPU %.2f s (%.2f ms per allocation)", label, ctrlCPU.Seconds(), float64(ctrlCPU.Microseconds())/1000/allocs)
	}
	if o.vms {
		ctrlCPU := processStat(b, o.ctrl.PID()).cpu - ctrlBefore.cpu
		b.Logf("%s: %d VM starts (claim made, filled, launcher ADD): p50 %.1f ms, p99 %.1f ms; ipkeeper-controller CPU %.2f s (%.2f ms per allocation)",
			label, len(vmLat), ms(percentile(vmLat, 50)), ms(percentile(vmLat, 99)), ctrlCPU.Seconds(), float64(ctrlCPU.Microseconds())/1000/allocs)
		record(row{fig: 2, what: fmt.Sprintf("%s: VM starts (%d), p50/p99; ipkeeper-controller CPU per allocation", label, len(vmLat)),
			measured: fmt.Sprintf("%.1f/%.1f ms; %.2f ms", ms(percentile(vmLat, 50)), ms(percentile(vmLat, 99)), float64(ctrlCPU.Microseconds())/1000/allocs),
			baseline: fmt.Sprintf("%.1f/%.1f ms all allocations", p50, p99), target: "(context)"})
	}
	return stepResult{rate: rate, api: cpAPI, etcd: cpEtcd, watchPerAlloc: watch / allocs}
}

// removeStep deletes what a step made (its pods, VMs' claims and raw
// ConfigMaps, and its networks' reservations) and waits until the
// reservations are gone, so that every step of figure 2 starts on a
// cluster of the same size: until 2026-11-28 each step's 2,000 pods and
// reservations stayed until the benchmark ended. This control plane runs
// no kube-controller-manager, so the namespace itself stays (empty).
func removeStep(b *testing.B, ns string, networks []string) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}, &ipamclaimsv1alpha1.IPAMClaim{}} {
		// Grace period 0: no kubelet confirms a pod's deletion here.
		if err := cp.Client.DeleteAllOf(ctx, obj, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
			b.Fatalf("removing step %s: deleting its %T: %v", ns, obj, err)
		}
	}
	deadline := start.Add(2 * time.Minute)
	for _, network := range networks {
		// Deleted here: ipkeeper-controller's garbage collector releases
		// a gone pod's reservation only after --gc-grace-period (2m).
		if err := cp.Client.DeleteAllOf(ctx, &ipkeeperv1alpha1.IPReservation{},
			client.MatchingLabels{naming.NetworkLabel: naming.NetworkLabelValue(network)}); err != nil {
			b.Fatalf("removing step %s: deleting the reservations of network %s: %v", ns, network, err)
		}
		for {
			var l ipkeeperv1alpha1.IPReservationList
			if err := cp.Client.List(ctx, &l, client.MatchingLabels{naming.NetworkLabel: naming.NetworkLabelValue(network)}, client.Limit(1)); err != nil {
				b.Fatalf("removing step %s: %v", ns, err)
			}
			if len(l.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("removing step %s: reservations of network %s still there after %v", ns, network, time.Since(start).Round(time.Second))
			}
			<-time.After(500 * time.Millisecond)
		}
	}
	b.Logf("step %s removed in %v", ns, time.Since(start).Round(100*time.Millisecond))
}

// stepRange is the range of scalingStep step's network, a /20 of its own:
// steps 0 to 15 in 10.129.0.0/16, 16 to 31 in 10.137.0.0/16.
func stepRange(step int) string {
	return fmt.Sprintf("10.%d.%d.0/20", 129+8*(step/16), 16*(step%16))
}

// scalingVM names the VM of step's k-th allocation.
func scalingVM(step, k int) string { return fmt.Sprintf("vm%d-%d", step, k) }

// scalingVMNet makes step's VM network: an IPPool of its own and a NAD
// naming it, which allows persistent IPs.
func scalingVMNet(b *testing.B, ns string, step int) bootNet {
	b.Helper()
	name := fmt.Sprintf("scale-vm-%d", step)
	n := bootNet{nad: name, network: name, pool: name, ranges: []string{fmt.Sprintf("10.130.%d.0/20", 16*step)}}
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: n.pool}}
	for _, r := range n.ranges {
		pool.Spec.Ranges = append(pool.Spec.Ranges, ipkeeperv1alpha1.PoolRange{Range: r})
	}
	if err := cp.Client.Create(context.Background(), pool); err != nil {
		b.Fatalf("creating IPPool %s: %v", n.pool, err)
	}
	b.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	cp.CreateNAD(b, ns, n.nad, n.conf())
	return n
}

// perResource renders a counter's increase from before to after per
// operation, by its resource label, largest first.
func perResource(before, after map[string]*dto.MetricFamily, name string, ops float64) string {
	byRes := func(mfs map[string]*dto.MetricFamily) map[string]float64 {
		out := map[string]float64{}
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "resource" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}
	return strings.Join(increasesPer(byRes(before), byRes(after), ops, 0.005), ", ")
}
