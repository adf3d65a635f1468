// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// bootSimulated says what figure 7 stands in for a VM.
const bootSimulated = "KubeVirt does not run here: a VM is what ipkeeper sees of one, " +
	"an IPAMClaim made as KubeVirt's ipam-extensions makes it (spec.network, spec.interface, a controller reference to its VirtualMachine, which does not exist; " +
	"no kube-controller-manager runs, so nothing collects the claim) and one virt-launcher pod made as virt-controller makes it and ipkeeper's webhook leaves it " +
	"(KubeVirt's labels and domain annotation, a controller reference to its VMI, bound to one of the 16 nodes, its Multus networks annotation referencing the claim), " +
	"then the launcher's CNI ADD sent straight to that node's agent socket (no kubelet, runtime, Multus or shim exec). " +
	"A plain pod is the same pod without the annotation, KubeVirt's labels or a claim"

// BenchmarkBootStorm (figure 7): a VM boot storm. On a control plane of
// its own, with ipkeeper-controller and 16 agent processes, one IPPool
// holding 20,000 pod reservations: 1,000 VMs created at once (claims,
// launcher pods and ADDs, each step of a VM after the one before, each
// step 32 in flight). Reported against baselines measured in the same
// run: agents' API requests per VM start against a plain pod's, the
// launchers' ADD p99 against plain pods' on the same agents, the
// controller's claim-fill rate against raw IPReservation creates at its
// number of workers, and the agents' RSS with 50,000 claims in the
// cluster against the same agents before.
func BenchmarkBootStorm(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bootStorm(b)
	}
}

func bootStorm(b *testing.B) {
	sc := bootStormScale(b)
	b.Logf("simulated: %s", bootSimulated)
	b.Logf("scale %.2g: %d VMs (%d dual-stack), %d agents, %d reservations held before the storm (pods of %d other nodes), %d claims for the memory figure",
		sc.factor, sc.vms, sc.dualVMs, bootAgents, sc.held, sc.heldNodes, sc.memClaims)
	setup := time.Now()
	c := startBootCluster(b)
	t0 := time.Now()
	c.holdPool(b, sc.held, sc.heldNodes)
	b.Logf("held %d addresses of IPPool %s (pods, blocks, reservations: raw creates) in %s", sc.held, bootSingle.pool, time.Since(t0).Round(time.Second))
	c.startController(b)
	nodes, stopNodes := startNodesOn(b, c.cp, "bs-node", bootAgents)
	defer stopNodes()
	c.nodes = nodes
	fills := c.watchFills(b, bootVMNS)
	c.waitControllerIdle(b)
	// Warm up: each node takes its first block, the controller its first
	// of the pool's blocks for claims, every path runs once.
	c.plainWave(b, "warm", 2*bootAgents)
	warm := c.vmStorm(b, bootSingle, "warm", bootAgents)
	fills.waitFilled(b, warm.claims)
	c.waitControllerIdle(b)
	b.Logf("setup and warm-up took %s", time.Since(setup).Round(time.Second))

	cpu0 := c.cpu(b)
	rawBefore := c.rawRate(b, 0, sc.raw)
	rawCPU := c.cpu(b) - cpu0
	plainA := c.plainWave(b, "a", sc.vms/2)
	c.waitControllerIdle(b)
	cpu0 = c.cpu(b)
	apiBefore := apiMetricsOf(b, c.cp)
	profiled, ctrlProfiled := profileAPIServerOf(b, c.cp, "bootstorm-claims-only"), c.profileController(b, "claims-only")
	claimsOnly := c.claimWave(b, fills, "co", sc.vms)
	c.waitControllerIdle(b)
	claimsOnly.cpu = c.cpu(b) - cpu0
	profiled()
	ctrlProfiled()
	apiAfter := apiMetricsOf(b, c.cp)
	b.Logf("claims only: API server requests per claim created and filled: %s; watch events sent per claim, by resource: %s",
		strings.Join(requestsPer(apiBefore, apiAfter, sc.vms, 0.01), ", "), perResource(apiBefore, apiAfter, "apiserver_watch_events_total", float64(sc.vms)))
	backlog := c.backlogWave(b, fills, "bl", sc.vms)

	ctrlBefore := c.ctrlMetrics(b)
	apiBefore = apiMetricsOf(b, c.cp)
	cpu0 = c.cpu(b)
	profiled, ctrlProfiled = profileAPIServerOf(b, c.cp, "bootstorm-storm"), c.profileController(b, "storm")
	b.StartTimer()
	storm := c.vmStorm(b, bootSingle, "vm", sc.vms)
	fills.waitFilled(b, storm.claims)
	b.StopTimer()
	c.waitControllerIdle(b)
	storm.cpu = c.cpu(b) - cpu0
	profiled()
	ctrlProfiled()
	ctrlAfter := c.ctrlMetrics(b)
	apiAfter = apiMetricsOf(b, c.cp)
	c.checkResults(b, storm, fills)

	restart := c.vmRestart(b, bootSingle, "vm", sc.vms)
	c.checkResults(b, restart, fills)
	// The controller records each claim's new launcher (status.ownerPod)
	// first: the baselines run with the controller idle.
	c.waitControllerIdle(b)
	plainB := c.plainWave(b, "b", sc.vms-sc.vms/2)
	seqLaunch, seqPlain := c.sequentialAdds(b, bootSingle, "vm", min(bootSequential, sc.vms))
	c.checkResults(b, seqLaunch, fills)
	c.waitControllerIdle(b)
	rawAfter := c.rawRate(b, 1, sc.raw)
	c.waitControllerIdle(b)
	dual := c.vmStorm(b, bootDual, "dual", sc.dualVMs)
	fills.waitFilled(b, dual.claims)
	c.checkResults(b, dual, fills)
	c.waitControllerIdle(b)
	dualRestart := c.vmRestart(b, bootDual, "dual", sc.dualVMs)
	c.checkResults(b, dualRestart, fills)
	c.waitControllerIdle(b)

	mem := c.memory(b, sc.memClaims)

	plain := plainA.merge(plainB)
	raw := (rawBefore + rawAfter) / 2
	claimsOnly.rawCPU = rawCPU / time.Duration(sc.raw)
	c.report(b, bootWaves{storm: storm, restart: restart, dual: dual, dualRestart: dualRestart, plain: plain, claimsOnly: claimsOnly,
		backlog: backlog, seqLaunch: seqLaunch, seqPlain: seqPlain},
		fills, raw, rawBefore, rawAfter, ctrlBefore, ctrlAfter, apiBefore, apiAfter, mem)
}

// wave is one wave of pod starts (VMs' launchers or plain pods) and what
// it measured.
type wave struct {
	n      int
	claims []string // the VMs' claims, in order
	// created is when each claim's create returned; sent when each ADD
	// was sent, lat its round trip, got its addresses.
	created, sent []time.Time
	lat           []time.Duration
	got           [][]netip.Prefix
	start         time.Time
	elapsed       time.Duration // from the first create to the last ADD's answer
	agents        agentCounts   // what the agents did meanwhile
	cpu           time.Duration // the control plane's CPU time, when measured
}

func newWave(n int) *wave {
	return &wave{n: n, claims: make([]string, n), created: make([]time.Time, n), sent: make([]time.Time, n),
		lat: make([]time.Duration, n), got: make([][]netip.Prefix, n)}
}

// merge joins the latencies and counts of two waves of the same kind.
func (w *wave) merge(o *wave) *wave {
	return &wave{n: w.n + o.n, lat: append(slices.Clone(w.lat), o.lat...), elapsed: w.elapsed + o.elapsed, agents: w.agents.plus(o.agents)}
}

// p returns the p-th percentile (0-100) of the wave's ADD latencies.
func (w *wave) p(pct int) time.Duration {
	s := slices.Clone(w.lat)
	slices.Sort(s)
	return percentile(s, pct)
}

// stages runs n items through steps: step s of item k starts once step
// s-1 of item k has ended, and every step keeps stormInFlight items in
// flight, taking them in order. All steps run at once, each as fast as its
// predecessor and the API server let it: 1,000 VMs are created at once,
// and each launcher starts as soon as its pod exists. An item whose step
// failed skips the rest.
func stages(b *testing.B, what string, n int, steps ...func(k int) error) {
	b.Helper()
	done := make([][]chan struct{}, len(steps))
	for s := range steps {
		done[s] = make([]chan struct{}, n)
		for k := range n {
			done[s][k] = make(chan struct{})
		}
	}
	bad := make([]atomic.Bool, n)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for s, step := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runConcurrently(n, stormInFlight, func(k int) {
				defer close(done[s][k])
				if s > 0 {
					<-done[s-1][k]
				}
				if bad[k].Load() {
					return
				}
				if err := step(k); err != nil {
					bad[k].Store(true)
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		// A rate or a percentile of failed starts measures nothing.
		b.Fatalf("%s: %d of %d failed; first: %v", what, len(errs), n, errs[0])
	}
}

func (c *bootCluster) nodeFor(k int) *node { return c.nodes[k%len(c.nodes)] }

// vmStorm creates n VMs at once (claim, launcher pod, ADD) on network net.
func (c *bootCluster) vmStorm(b *testing.B, net bootNet, prefix string, n int) *wave {
	b.Helper()
	ctx := context.Background()
	w := newWave(n)
	pods := make([]*corev1.Pod, n)
	conf := net.conf()
	vm := func(k int) string { return fmt.Sprintf("%s-%d", prefix, k) }
	before := agentTotals(b, c.nodes)
	w.start = time.Now()
	stages(b, fmt.Sprintf("%d VMs on %s", n, net.network), n,
		func(k int) error {
			claim := vmClaim(bootVMNS, vm(k), uuid.NewUUID(), net.network)
			if err := c.cp.Client.Create(ctx, claim); err != nil {
				return fmt.Errorf("creating IPAMClaim %s: %w", claim.Name, err)
			}
			w.claims[k], w.created[k] = claim.Name, time.Now()
			return nil
		},
		func(k int) error {
			pods[k] = launcherPod(bootVMNS, vm(k), "virt-launcher-"+vm(k)+"-1", c.nodeFor(k).name, net)
			return c.cp.Client.Create(ctx, pods[k])
		},
		func(k int) error { return w.add(ctx, k, c.nodeFor(k), pods[k], bootIf, conf) },
	)
	w.elapsed = time.Since(w.start)
	w.agents = agentTotals(b, c.nodes).minus(before)
	return w
}

// vmRestart starts the n VMs of an earlier storm again: a new launcher
// pod each, on the next node, whose ADD finds the claim filled.
func (c *bootCluster) vmRestart(b *testing.B, net bootNet, prefix string, n int) *wave {
	b.Helper()
	ctx := context.Background()
	w := newWave(n)
	pods := make([]*corev1.Pod, n)
	conf := net.conf()
	before := agentTotals(b, c.nodes)
	w.start = time.Now()
	stages(b, fmt.Sprintf("restart of %d VMs", n), n,
		func(k int) error {
			vm := fmt.Sprintf("%s-%d", prefix, k)
			w.claims[k] = vm + "." + bootLogical
			pods[k] = launcherPod(bootVMNS, vm, "virt-launcher-"+vm+"-2", c.nodeFor(k+1).name, net)
			return c.cp.Client.Create(ctx, pods[k])
		},
		func(k int) error { return w.add(ctx, k, c.nodeFor(k+1), pods[k], bootIf, conf) },
	)
	w.elapsed = time.Since(w.start)
	w.agents = agentTotals(b, c.nodes).minus(before)
	return w
}

// plainWave starts n plain pods (pod, ADD) on the storm's network, on the
// same agents.
func (c *bootCluster) plainWave(b *testing.B, tag string, n int) *wave {
	b.Helper()
	ctx := context.Background()
	w := newWave(n)
	pods := make([]*corev1.Pod, n)
	conf := bootSingle.conf()
	before := agentTotals(b, c.nodes)
	w.start = time.Now()
	stages(b, fmt.Sprintf("%d plain pods", n), n,
		func(k int) error {
			pods[k] = plainPod(bootVMNS, fmt.Sprintf("plain-%s-%d", tag, k), c.nodeFor(k).name)
			return c.cp.Client.Create(ctx, pods[k])
		},
		func(k int) error { return w.add(ctx, k, c.nodeFor(k), pods[k], "net1", conf) },
	)
	w.elapsed = time.Since(w.start)
	w.agents = agentTotals(b, c.nodes).minus(before)
	return w
}

// add sends pod's ADD for ifName to nd's socket and records it.
func (w *wave) add(ctx context.Context, k int, nd *node, p *corev1.Pod, ifName string, conf json.RawMessage) error {
	id := framework.SandboxID(p)
	w.sent[k] = time.Now()
	resp, err := nd.client.Do(ctx, cniproto.Request{Command: cniproto.CmdAdd, ContainerID: id, Netns: "/var/run/netns/" + p.Name,
		IfName: ifName, Args: podArgs(p, id), Config: conf})
	w.lat[k] = time.Since(w.sent[k])
	if err != nil {
		return fmt.Errorf("ADD of pod %s on %s: %w", p.Name, nd.name, err)
	}
	var res types100.Result
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return fmt.Errorf("ADD of pod %s: decoding %s: %w", p.Name, resp.Result, err)
	}
	for _, ip := range res.IPs {
		pfx, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			return fmt.Errorf("ADD of pod %s: address %v", p.Name, ip.Address)
		}
		bits, _ := ip.Address.Mask.Size()
		w.got[k] = append(w.got[k], netip.PrefixFrom(pfx.Unmap(), bits))
	}
	return nil
}

// checkResults checks that each launcher got its claim's addresses.
func (c *bootCluster) checkResults(b *testing.B, w *wave, fills *fillWatch) {
	b.Helper()
	bad := 0
	for k, claim := range w.claims {
		_, ips, _ := fills.filled(claim)
		got := make([]string, len(w.got[k]))
		for i, p := range w.got[k] {
			got[i] = p.Addr().String()
		}
		want := make([]string, len(ips))
		for i, s := range ips {
			want[i] = strings.SplitN(s, "/", 2)[0]
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			if bad++; bad <= 3 {
				b.Errorf("launcher of claim %s got %v, the claim records %v", claim, got, want)
			}
		}
	}
	if bad > 0 {
		b.Fatalf("%d of %d launchers got other addresses than their claims record", bad, len(w.claims))
	}
}

// agentCounts sums what the agents' /metrics count: live API reads by
// verb (claims, reservations, NADs, pools, blocks), writes, pod reads that
// missed the cache, and CPU seconds.
type agentCounts struct{ get, list, watch, writes, podAPI, cpu float64 }

func agentTotals(b *testing.B, nodes []*node) agentCounts {
	b.Helper()
	var a agentCounts
	for _, nd := range nodes {
		m := nd.scrape(b)
		a.get += sum(m, "ipkeeper_agent_api_reads_total", "verb", "get")
		a.list += sum(m, "ipkeeper_agent_api_reads_total", "verb", "list")
		a.watch += sum(m, "ipkeeper_agent_api_reads_total", "verb", "watch")
		a.writes += sum(m, "ipkeeper_agent_api_writes_total")
		a.podAPI += sum(m, "ipkeeper_agent_pod_lookups_total", "source", "api")
		a.cpu += sum(m, "process_cpu_seconds_total")
	}
	return a
}

func (a agentCounts) minus(o agentCounts) agentCounts {
	return agentCounts{a.get - o.get, a.list - o.list, a.watch - o.watch, a.writes - o.writes, a.podAPI - o.podAPI, a.cpu - o.cpu}
}

func (a agentCounts) plus(o agentCounts) agentCounts {
	return agentCounts{a.get + o.get, a.list + o.list, a.watch + o.watch, a.writes + o.writes, a.podAPI + o.podAPI, a.cpu + o.cpu}
}

func (a agentCounts) reads() float64 { return a.get + a.list + a.watch }

// per describes the counts per start of n.
func (a agentCounts) per(n int) string {
	f := float64(n)
	return fmt.Sprintf("%.2f reads (get %.2f, watch %.2f, list %.2f), %.2f writes; +%.2f pod reads",
		a.reads()/f, a.get/f, a.watch/f, a.list/f, a.writes/f, a.podAPI/f)
}

// rawRate creates n reservations straight to the API server, as many in
// flight as the controller has claim workers, and returns creates/s. Each
// is the object the controller creates for a claim (labelled as in its
// blocks, so no agent is sent it), owned by a claim of a network nothing
// serves, which the controller leaves alone.
func (c *bootCluster) rawRate(b *testing.B, phase, n int) float64 {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	createAll(b, "raw reservations", n, claimaddrs.DefaultWorkers, func(k int) error {
		ip := netip.AddrFrom4([4]byte{10, byte(170 + phase), byte(k >> 8), byte(k)})
		return c.cp.Client.Create(ctx, claimReservation("bs-raw", "bs-raw", ip, c.rawOwner))
	})
	return float64(n) / time.Since(start).Seconds()
}

// bootMemReading is one agent's memory at one moment.
type bootMemReading struct{ rss, heap, cached float64 }

// memResult is the memory figure: the 16 agents before and after the
// claims were created, and an agent started before and one after.
type memResult struct {
	n                 int
	before, after     []bootMemReading
	lateBefore, lateA bootMemReading
	took              time.Duration
}

func readMem(b *testing.B, nd *node) bootMemReading {
	b.Helper()
	m := nd.scrape(b)
	return bootMemReading{rss: nd.stat(b).rss, heap: sum(m, "go_memstats_heap_alloc_bytes"), cached: sum(m, "ipkeeper_agent_reservations")}
}

// memory measures the agents' memory with n claims and their reservations
// in the cluster against the same agents before them. The claims, the
// blocks of IPAMClaims and the reservations are created directly, as
// ipkeeper-controller makes them (reservations labelled
// ipkeeper.io/claims-block=true), with the controller stopped (it would
// fill the claims itself); their status is not written: no agent caches a
// claim, it reads one live per VM start.
func (c *bootCluster) memory(b *testing.B, n int) memResult {
	b.Helper()
	ctx := context.Background()
	r := memResult{n: n}
	c.createMarker(b, c.nodes)
	for _, nd := range c.nodes {
		r.before = append(r.before, readMem(b, nd))
	}
	r.lateBefore = c.lateAgent(b, "bs-late-before")
	c.stopController()

	start := time.Now()
	pool, rng := c.poolRange(b, bootMem.pool)
	ips, blks := addrs(b, rng, n)
	createAll(b, "the claims' blocks", len(blks), bootCreateInFlight, func(k int) error {
		return c.cp.Client.Create(ctx, &ipkeeperv1alpha1.IPBlock{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Block(pool.LockKey(), blks[k]),
				Labels: map[string]string{naming.PoolLabel: naming.PoolLabelValue(pool.Name)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: ipkeeperv1alpha1.GroupVersion.String(), Kind: "IPPool", Name: pool.Name, UID: pool.UID,
					BlockOwnerDeletion: ptr.To(false)}}},
			Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: pool.Name, CIDR: blks[k].String(), Holder: ipkeeperv1alpha1.HolderIPAMClaims},
		})
	})
	createAll(b, "the claims and their reservations", n, bootCreateInFlight, func(k int) error {
		claim := vmClaim(bootMemNS, fmt.Sprintf("mem-%d", k), uuid.NewUUID(), bootMem.network)
		if err := c.cp.Client.Create(ctx, claim); err != nil {
			return err
		}
		return c.cp.Client.Create(ctx, claimReservation(pool.LockKey(), bootMem.network, ips[k], claim))
	})
	r.took = time.Since(start)
	c.createMarker(b, c.nodes)
	for _, nd := range c.nodes {
		r.after = append(r.after, readMem(b, nd))
	}
	r.lateA = c.lateAgent(b, "bs-late-after")
	return r
}

// lateAgent starts an agent, reads its memory once it has its caches, and stops it.
func (c *bootCluster) lateAgent(b *testing.B, name string) bootMemReading {
	b.Helper()
	late, stop := startNodesOn(b, c.cp, name, 1)
	defer stop()
	c.createMarker(b, late)
	return readMem(b, late[0])
}

// requestsBy returns apiserver_request_total by "resource[/subresource] VERB".
func requestsBy(mfs map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range mfs["apiserver_request_total"].GetMetric() {
		var res, sub, verb string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "resource":
				res = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			case "verb":
				verb = l.GetValue()
			}
		}
		if sub != "" {
			res += "/" + sub
		}
		out[res+" "+verb] += m.GetCounter().GetValue()
	}
	return out
}

// requestsPer lists the API server's requests between two scrapes per
// one of n, the most frequent first, those of at least min.
func requestsPer(before, after map[string]*dto.MetricFamily, n int, minimum float64) []string {
	return increasesPer(requestsBy(before), requestsBy(after), float64(n), minimum)
}

// increasesPer lists, as "key value", each key's increase from before
// to after per one of n, the largest first, those of at least minimum.
func increasesPer(before, after map[string]float64, n, minimum float64) []string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range after {
		if d := (v - before[k]) / n; d >= minimum {
			all = append(all, kv{k, d})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	out := make([]string, len(all))
	for i, e := range all {
		out[i] = fmt.Sprintf("%s %.2f", e.k, e.v)
	}
	return out
}

// bootWaves are figure 7's waves.
type bootWaves struct {
	storm, restart, dual, dualRestart, plain, seqLaunch, seqPlain *wave
	claimsOnly, backlog                                           claimsOnlyResult
}

func (c *bootCluster) report(b *testing.B, w bootWaves, fills *fillWatch, raw, rawBefore, rawAfter float64,
	ctrlBefore, ctrlAfter, apiBefore, apiAfter map[string]*dto.MetricFamily, mem memResult) {
	storm, restart, dual, plain := w.storm, w.restart, w.dual, w.plain
	n := float64(storm.n)

	// (a) API requests per VM start.
	single := storm.agents
	record(row{fig: 7, what: fmt.Sprintf("agents' API requests per VM start (%d VMs at once, single-stack)", storm.n),
		measured: single.per(storm.n), baseline: "plain pod ADD: " + plain.agents.per(plain.n),
		// The claim's watch, one consistent read confirming what the watch
		// cache showed, the reservation's read.
		target: "no list, <= 3 reads", verdict: verdict(single.list == 0 && single.reads()/n <= 3)})
	record(row{fig: 7, what: fmt.Sprintf("agents' API requests per VM restart (%d VMs, claims filled)", restart.n),
		measured: restart.agents.per(restart.n), target: "(context)"})
	record(row{fig: 7, what: fmt.Sprintf("agents' API requests per VM start, dual-stack (%d VMs at once)", dual.n),
		measured: dual.agents.per(dual.n), target: "(context)"})
	record(row{fig: 7, what: fmt.Sprintf("agents' API requests per VM restart, dual-stack (%d VMs, claims filled)", w.dualRestart.n),
		measured: w.dualRestart.agents.per(w.dualRestart.n), target: "(context)"})
	record(row{fig: 7, what: "agents' CPU per VM start (per VM restart)",
		measured: fmt.Sprintf("%.2f ms (%.2f ms)", 1000*single.cpu/n, 1000*restart.agents.cpu/float64(restart.n)),
		baseline: fmt.Sprintf("%.2f ms per plain pod ADD", 1000*plain.agents.cpu/float64(plain.n)), target: "(context)"})

	// (b) ADD latency against plain pods'.
	p99, plain99 := storm.p(99), plain.p(99)
	record(row{fig: 7, what: "launcher ADD p99 (p50), VMs at once",
		measured: fmt.Sprintf("%.1f ms (%.1f)", ms(p99), ms(storm.p(50))), baseline: fmt.Sprintf("%.1f ms (%.1f) plain pod ADDs, same agents", ms(plain99), ms(plain.p(50))),
		ratio: fmt.Sprintf("%.2fx", float64(p99)/float64(plain99)), target: "<= 1x", verdict: verdict(p99 <= plain99)})
	early := &wave{}
	for k, claim := range storm.claims {
		if at, _, ok := fills.filled(claim); ok && at.Before(storm.sent[k]) {
			early.lat = append(early.lat, storm.lat[k])
		}
	}
	if len(early.lat) > 0 {
		record(row{fig: 7, what: fmt.Sprintf("launcher ADD p99 (p50), claim filled before the ADD (%d of %d)", len(early.lat), storm.n),
			measured: fmt.Sprintf("%.1f ms (%.1f)", ms(early.p(99)), ms(early.p(50))), baseline: fmt.Sprintf("%.1f ms (%.1f) plain", ms(plain99), ms(plain.p(50))),
			ratio: fmt.Sprintf("%.2fx", float64(early.p(99))/float64(plain99)), target: "(context)"})
	}
	record(row{fig: 7, what: "launcher ADD p99 (p50), VM restart (claims filled)",
		measured: fmt.Sprintf("%.1f ms (%.1f)", ms(restart.p(99)), ms(restart.p(50))), baseline: fmt.Sprintf("%.1f ms (%.1f) plain", ms(plain99), ms(plain.p(50))),
		ratio: fmt.Sprintf("%.2fx", float64(restart.p(99))/float64(plain99)), target: "(context)"})
	sl, sp := w.seqLaunch, w.seqPlain
	record(row{fig: 7, what: fmt.Sprintf("sequential ADD p50 (p99), launcher of a filled claim (%d, alternating)", sl.n),
		measured: fmt.Sprintf("%.2f ms (%.2f)", ms(sl.p(50)), ms(sl.p(99))), baseline: fmt.Sprintf("%.2f ms (%.2f) plain pod ADD", ms(sp.p(50)), ms(sp.p(99))),
		ratio: fmt.Sprintf("%.2fx", float64(sl.p(50))/float64(sp.p(50))), target: "(context)"})

	// (c) The controller's fill rate.
	var last time.Time
	var fillLat []time.Duration
	for k, claim := range storm.claims {
		at, _, _ := fills.filled(claim)
		if at.After(last) {
			last = at
		}
		fillLat = append(fillLat, at.Sub(storm.created[k]))
	}
	slices.Sort(fillLat)
	fillRate := n / last.Sub(storm.start).Seconds()
	bl := w.backlog
	blRate := float64(bl.n-1) / bl.elapsed.Seconds()
	record(row{fig: 7, what: fmt.Sprintf("controller claim-fill rate, a backlog of %d claims (started on them; first fill to last)", bl.n),
		measured: fmt.Sprintf("%.0f/s (%d in %.1f s)", blRate, bl.n, bl.elapsed.Seconds()),
		baseline: fmt.Sprintf("%.0f/s raw IPReservation creates, %d in flight", raw, claimaddrs.DefaultWorkers),
		ratio:    fmt.Sprintf("%.2fx", blRate/raw), target: ">= 0.5x", verdict: verdict(blRate/raw >= 0.5)})
	record(row{fig: 7, what: "controller claim-fill rate, from the storm's start (fill latency p50 / p99)",
		measured: fmt.Sprintf("%.0f/s (%d in %.1f s; %.0f / %.0f ms)", fillRate, storm.n, last.Sub(storm.start).Seconds(), ms(percentile(fillLat, 50)), ms(percentile(fillLat, 99))),
		baseline: fmt.Sprintf("%.0f/s raw IPReservation creates, %d in flight", raw, claimaddrs.DefaultWorkers),
		ratio:    fmt.Sprintf("%.2fx", fillRate/raw), target: "(context)"})
	co := w.claimsOnly
	record(row{fig: 7, what: fmt.Sprintf("controller claim-fill rate, %d claims at once and nothing else (fill latency p50 / p99)", co.n),
		measured: fmt.Sprintf("%.0f/s (%d in %.1f s; %.0f / %.0f ms)", co.rate(), co.n, co.elapsed.Seconds(), ms(percentile(co.lat, 50)), ms(percentile(co.lat, 99))),
		baseline: fmt.Sprintf("%.0f/s raw IPReservation creates", raw), ratio: fmt.Sprintf("%.2fx", co.rate()/raw), target: "(context)"})
	perClaim := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	record(row{fig: 7, what: "kube-apiserver + etcd CPU per claim filled, backlog (controller start and list included)",
		measured: fmt.Sprintf("%.2f ms", perClaim(bl.cpu, bl.n)), baseline: fmt.Sprintf("%.2f ms per raw IPReservation create", perClaim(co.rawCPU, 1)),
		ratio: fmt.Sprintf("%.1fx", float64(bl.cpu)/float64(bl.n)/float64(co.rawCPU)), target: "(context)"})
	record(row{fig: 7, what: "kube-apiserver + etcd CPU per claim created and filled, claims only (storm: per VM start)",
		measured: fmt.Sprintf("%.2f ms (%.2f ms)", perClaim(co.cpu, co.n), perClaim(storm.cpu, storm.n)),
		baseline: fmt.Sprintf("%.2f ms per raw IPReservation create", perClaim(co.rawCPU, 1)),
		ratio:    fmt.Sprintf("%.1fx (%.1fx)", float64(co.cpu)/float64(co.n)/float64(co.rawCPU), float64(storm.cpu)/float64(storm.n)/float64(co.rawCPU)), target: "(context)"})
	cd := func(name string, where ...string) float64 {
		return (sum(ctrlAfter, name, where...) - sum(ctrlBefore, name, where...)) / n
	}
	var methods []string
	for _, m := range []string{"POST", "PUT", "PATCH", "GET", "DELETE"} {
		if v := cd("rest_client_requests_total", "method", m); v > 0 {
			methods = append(methods, fmt.Sprintf("%s %.2f", m, v))
		}
	}
	record(row{fig: 7, what: "controller API requests per claim (client-go, by method)",
		measured: strings.Join(methods, ", "),
		baseline: fmt.Sprintf("reservation creates %.2f, blocks taken %.3f, conflicts %.2f, fills %.2f", cd("ipkeeper_controller_claims_reservation_creates_total"),
			cd("ipkeeper_controller_claims_blocks_taken_total"), cd("ipkeeper_controller_claims_allocation_conflicts_total"), cd("ipkeeper_controller_claims_filled_total")),
		ratio:  fmt.Sprintf("%.2f ms CPU", 1000*cd("process_cpu_seconds_total")),
		target: "(context)"})
	perStart := requestsPer(apiBefore, apiAfter, storm.n, 0.01)
	top := perStart
	if len(top) > 8 {
		top = top[:8]
	}
	record(row{fig: 7, what: "API server requests per VM start, all clients (storm)", measured: strings.Join(top, ", "), target: "(context)"})

	// (d) Agents' memory.
	var before, after, worst float64
	for i := range mem.before {
		before += mem.before[i].rss
		after += mem.after[i].rss
		worst = max(worst, mem.after[i].rss/mem.before[i].rss)
	}
	agents := float64(len(mem.before))
	record(row{fig: 7, what: fmt.Sprintf("agent RSS, %d claims and their reservations in the cluster (mean of %d)", mem.n, len(mem.before)),
		measured: fmt.Sprintf("%.1f MiB", mib(after/agents)), baseline: fmt.Sprintf("%.1f MiB the same agents before", mib(before/agents)),
		ratio: fmt.Sprintf("%.2fx (worst agent %.2fx)", after/before, worst), target: "<= 1.1x", verdict: verdict(worst <= 1.1)})
	record(row{fig: 7, what: fmt.Sprintf("agent RSS, started with %d claims in the cluster", mem.n),
		measured: fmt.Sprintf("%.1f MiB", mib(mem.lateA.rss)), baseline: fmt.Sprintf("%.1f MiB started before them", mib(mem.lateBefore.rss)),
		ratio: fmt.Sprintf("%.2fx", mem.lateA.rss/mem.lateBefore.rss), target: "(context)"})

	var heapB, heapA, cachedB, cachedA float64
	for i := range mem.before {
		heapB += mem.before[i].heap
		heapA += mem.after[i].heap
		cachedB += mem.before[i].cached
		cachedA += mem.after[i].cached
	}
	b.Logf("storm: %d VMs at once in %s (ADD p50 %.1f ms, p99 %.1f ms; %d claims filled before their ADD was sent); agents per VM start: %s; agents' CPU %.2f ms per VM start",
		storm.n, storm.elapsed.Round(time.Millisecond), ms(storm.p(50)), ms(p99), len(early.lat), single.per(storm.n), 1000*single.cpu/n)
	b.Logf("restart: %d VMs in %s (ADD p50 %.1f ms, p99 %.1f ms); agents per VM start: %s", restart.n, restart.elapsed.Round(time.Millisecond),
		ms(restart.p(50)), ms(restart.p(99)), restart.agents.per(restart.n))
	b.Logf("dual-stack: %d VMs in %s (ADD p50 %.1f ms, p99 %.1f ms); agents per VM start: %s", dual.n, dual.elapsed.Round(time.Millisecond),
		ms(dual.p(50)), ms(dual.p(99)), dual.agents.per(dual.n))
	b.Logf("plain pods: %d in two waves (before and after the storm) in %s (ADD p50 %.1f ms, p99 %.1f ms); agents per ADD: %s", plain.n,
		plain.elapsed.Round(time.Millisecond), ms(plain.p(50)), ms(plain99), plain.agents.per(plain.n))
	b.Logf("controller: %.0f claims filled/s from the storm's start (last at +%.2f s); raw IPReservation creates %.0f/s (before %.0f, after %.0f), %d in flight; fill latency p50 %.0f ms, p99 %.0f ms; per claim: %s",
		fillRate, last.Sub(storm.start).Seconds(), raw, rawBefore, rawAfter, claimaddrs.DefaultWorkers, ms(percentile(fillLat, 50)), ms(percentile(fillLat, 99)), strings.Join(methods, ", "))
	b.Logf("API server requests per VM start during the storm (until the controller was idle): %s", strings.Join(perStart, ", "))
	rc, rcSum := histDelta(ctrlBefore, ctrlAfter, "controller_runtime_reconcile_time_seconds", "controller", "claim-addresses")
	qc, qcSum := histDelta(ctrlBefore, ctrlAfter, "workqueue_queue_duration_seconds", "name", "claim-addresses")
	b.Logf("controller during the storm: %.0f claim reconciles (%.2f per claim), %.1f ms each on average, after %.1f ms in the queue on average; reconcile errors %.0f; "+
		"API answers other than 2xx: %s; claims only: %d claims in %s, %.0f/s, fill latency p50 %.0f ms, p99 %.0f ms",
		rc, rc/n, 1000*rcSum/max(rc, 1), 1000*qcSum/max(qc, 1), cd("controller_runtime_reconcile_errors_total", "controller", "claim-addresses")*n,
		non2xx(ctrlBefore, ctrlAfter), co.n, co.elapsed.Round(time.Millisecond), co.rate(), ms(percentile(co.lat, 50)), ms(percentile(co.lat, 99)))
	b.Logf("memory: %d claims, their blocks and reservations created in %s; agents (mean of %d) RSS %.1f -> %.1f MiB, heap %.1f -> %.1f MiB, cached reservations %.0f -> %.0f; worst agent %.2fx; "+
		"an agent started before them %.1f MiB RSS (%.1f heap), after them %.1f MiB (%.1f heap)",
		mem.n, mem.took.Round(time.Second), len(mem.before), mib(before/agents), mib(after/agents), mib(heapB/agents), mib(heapA/agents), cachedB/agents, cachedA/agents, worst,
		mib(mem.lateBefore.rss), mib(mem.lateBefore.heap), mib(mem.lateA.rss), mib(mem.lateA.heap))
	b.ReportMetric(blRate, "claim-fills/s")
	b.ReportMetric(blRate/raw, "fill-ratio")
	b.ReportMetric(fillRate/raw, "storm-fill-ratio")
	b.ReportMetric(single.reads()/n, "agent-reads/vm")
	b.ReportMetric(ms(p99), "launcher-p99-ms")
	b.ReportMetric(ms(plain99), "plain-p99-ms")
}

// claimsOnlyResult is a wave of claims with nothing else.
type claimsOnlyResult struct {
	n       int
	elapsed time.Duration   // from the first create to the last fill seen
	lat     []time.Duration // claim created to filled, sorted
	// cpu is the control plane's CPU time over the wave (until the
	// controller was idle), rawCPU its CPU time per raw create.
	cpu, rawCPU time.Duration
}

func (r claimsOnlyResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// claimWave creates n claims at once (stormInFlight creates in flight),
// no launcher pods and no ADDs, and measures how fast the controller
// fills them: the controller's own rate, without the storm's other load.
func (c *bootCluster) claimWave(b *testing.B, fills *fillWatch, prefix string, n int) claimsOnlyResult {
	b.Helper()
	ctx := context.Background()
	names := make([]string, n)
	created := make([]time.Time, n)
	start := time.Now()
	createAll(b, "claims", n, stormInFlight, func(k int) error {
		claim := namingNAD(vmClaim(bootVMNS, fmt.Sprintf("%s-%d", prefix, k), uuid.NewUUID(), bootSingle.network), bootSingle.nad)
		names[k] = claim.Name
		if err := c.cp.Client.Create(ctx, claim); err != nil {
			return err
		}
		created[k] = time.Now()
		return nil
	})
	fills.waitFilled(b, names)
	r := claimsOnlyResult{n: n}
	for k, name := range names {
		at, _, _ := fills.filled(name)
		r.elapsed = max(r.elapsed, at.Sub(start))
		r.lat = append(r.lat, at.Sub(created[k]))
	}
	slices.Sort(r.lat)
	return r
}

// backlogWave measures the controller's own fill rate: with it stopped,
// n claims are created (not timed); it is started on them, and the rate
// is from its first fill to its last, while the API server serves nothing
// but the controller (and the watches of the agents, which ignore claims'
// reservations). cpu is the control plane's from the start to idle.
func (c *bootCluster) backlogWave(b *testing.B, fills *fillWatch, prefix string, n int) claimsOnlyResult {
	b.Helper()
	ctx := context.Background()
	c.stopController()
	names := make([]string, n)
	createAll(b, "backlog claims", n, stormInFlight, func(k int) error {
		claim := namingNAD(vmClaim(bootVMNS, fmt.Sprintf("%s-%d", prefix, k), uuid.NewUUID(), bootSingle.network), bootSingle.nad)
		names[k] = claim.Name
		return c.cp.Client.Create(ctx, claim)
	})
	cpu0 := c.cpu(b)
	apiBefore := apiMetricsOf(b, c.cp)
	apiProfiled := profileAPIServerOf(b, c.cp, "bootstorm-backlog")
	c.startController(b)
	profiled := c.profileController(b, "backlog")
	fills.waitFilled(b, names)
	c.waitControllerIdle(b)
	r := claimsOnlyResult{n: n, cpu: c.cpu(b) - cpu0}
	profiled()
	apiProfiled()
	apiAfter := apiMetricsOf(b, c.cp)
	b.Logf("backlog: API server requests per claim filled (the controller's start included): %s; watch events sent per claim, by resource: %s",
		strings.Join(requestsPer(apiBefore, apiAfter, n, 0.01), ", "), perResource(apiBefore, apiAfter, "apiserver_watch_events_total", float64(n)))
	var first, last time.Time
	for _, name := range names {
		at, _, _ := fills.filled(name)
		if first.IsZero() || at.Before(first) {
			first = at
		}
		last = later(last, at)
	}
	r.elapsed = last.Sub(first)
	return r
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// histDelta returns the count and sum of a histogram series between two scrapes.
func histDelta(before, after map[string]*dto.MetricFamily, name, label, value string) (count, total float64) {
	_, cb, sb := histogram(before, name, label, value)
	_, ca, sa := histogram(after, name, label, value)
	return float64(ca - cb), sa - sb
}

// non2xx lists the client's answers by code other than 2xx between two
// scrapes of rest_client_requests_total ("none" when there were none).
func non2xx(before, after map[string]*dto.MetricFamily) string {
	count := func(mfs map[string]*dto.MetricFamily) map[string]float64 {
		out := map[string]float64{}
		for _, m := range mfs["rest_client_requests_total"].GetMetric() {
			var code, method string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "code":
					code = l.GetValue()
				case "method":
					method = l.GetValue()
				}
			}
			if !strings.HasPrefix(code, "2") {
				out[method+" "+code] += m.GetCounter().GetValue()
			}
		}
		return out
	}
	b, a := count(before), count(after)
	var out []string
	for k, v := range a {
		if d := v - b[k]; d > 0 {
			out = append(out, fmt.Sprintf("%s: %.0f", k, d))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// bootSequential is how many launcher and plain ADDs are sent one at a time.
const bootSequential = 100

// sequentialAdds sends n ADDs one at a time, alternating a launcher of a
// filled claim (a new launcher pod of VM prefix-k) and a plain pod, both
// pods created beforehand: what each path costs without a storm's queues.
func (c *bootCluster) sequentialAdds(b *testing.B, net bootNet, prefix string, n int) (launch, plain *wave) {
	b.Helper()
	ctx := context.Background()
	launch, plain = newWave(n), newWave(n)
	lp, pp := make([]*corev1.Pod, n), make([]*corev1.Pod, n)
	createAll(b, "the pods of the sequential ADDs", n, stormInFlight, func(k int) error {
		vm := fmt.Sprintf("%s-%d", prefix, k)
		launch.claims[k] = vm + "." + bootLogical
		lp[k] = launcherPod(bootVMNS, vm, "virt-launcher-"+vm+"-3", c.nodeFor(k).name, net)
		pp[k] = plainPod(bootVMNS, fmt.Sprintf("plain-seq-%d", k), c.nodeFor(k).name)
		if err := c.cp.Client.Create(ctx, lp[k]); err != nil {
			return err
		}
		return c.cp.Client.Create(ctx, pp[k])
	})
	// The controller records each claim's new launcher (status.ownerPod).
	c.waitControllerIdle(b)
	conf, plainConf := net.conf(), bootSingle.conf()
	for k := range n {
		if err := launch.add(ctx, k, c.nodeFor(k), lp[k], bootIf, conf); err != nil {
			b.Fatal(err)
		}
		if err := plain.add(ctx, k, c.nodeFor(k), pp[k], "net1", plainConf); err != nil {
			b.Fatal(err)
		}
	}
	return launch, plain
}
