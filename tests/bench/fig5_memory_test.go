// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// BenchmarkMemory (figure 5): an agent process's RSS and Go heap as the
// cluster grows, against the same process before (holding what earlier
// figures left, about 10,000 reservations).
//
// First what a large cluster is made of: 50,000 VMs (an IPAMClaim and its
// reservation each, as ipkeeper-controller makes them in its claims'
// blocks) and 50,000 other nodes' pod reservations (as their agents make
// them in their nodes' blocks), whole objects, none of which an agent is
// sent; an agent started after them shows what a list costs. Then 50,000
// reservations an agent does cache (shared: borrowed addresses,
// other writers'), filled by watch in the running agent and by list in
// one started after them. The reservations stay: figure 6, which runs
// after it, sees a cluster of that size (files are named so that go test
// runs the figures in order).
func BenchmarkMemory(b *testing.B) {
	n := 50000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx := context.Background()
		// The heap the agent's /metrics reports holds garbage not yet
		// collected (up to GOGC=100% more); the runtime's GC trace, in the
		// agent's log, says what each collection found live.
		b.Setenv("GODEBUG", "gctrace=1")
		nodes, stop := startNodes(b, fmt.Sprintf("mem%d-node", i), 1)
		watcher := nodes[0]
		settle()
		idle := memOf(b, watcher)
		cached0 := sum(watcher.scrape(b), "ipkeeper_agent_reservations")

		// A large cluster: other nodes' pod reservations in their blocks
		// and VMs' claims and reservations in the controller's. A marker
		// the agent is sent, created after them, says when it would have
		// had them all.
		labelled := fmt.Sprintf("mem-labelled-%d", i)
		createMany(b, n, func(k int) *ipkeeperv1alpha1.IPReservation {
			return memReservation(labelled, netip.AddrFrom4([4]byte{10, byte(96 + i), byte(k >> 8), byte(k)}), k, reservation.NodeBlock)
		})
		vms := fmt.Sprintf("mem-vms-%d", i)
		createVMs(b, cp.NewNamespace(b, "mem-vms"), vms, n, func(k int) netip.Addr {
			return netip.AddrFrom4([4]byte{10, byte(112 + i), byte(k >> 8), byte(k)})
		})
		createMany(b, 1, func(k int) *ipkeeperv1alpha1.IPReservation {
			return memReservation(labelled+"-marker", netip.AddrFrom4([4]byte{10, byte(96 + i), 255, 255}), k, reservation.NoBlock)
		})
		if err := framework.Eventually(ctx, 2*time.Minute, 200*time.Millisecond, func(context.Context) (bool, error) {
			return sum(watcher.scrape(b), "ipkeeper_agent_reservations") >= cached0+1, nil
		}); err != nil {
			b.Fatalf("the agent never cached the marker: %v", err)
		}
		settle()
		scoped := memOf(b, watcher)
		late, stopLate := startNodes(b, fmt.Sprintf("mem%d-late0", i), 1)
		settle()
		scopedLate := memOf(b, late[0])
		stopLate()
		worstScoped := max(scoped.rss, scopedLate.rss)
		b.Logf("agent with %d VMs and %d other nodes' pod reservations in the cluster: running RSS %.1f MiB (live heap %.1f), started after them RSS %.1f MiB (live heap %.1f); before them RSS %.1f MiB (live heap %.1f)",
			n, n, mib(scoped.rss), mib(scoped.live), mib(scopedLate.rss), mib(scopedLate.live), mib(idle.rss), mib(idle.live))
		record(row{fig: 5, what: fmt.Sprintf("agent RSS, %d VMs and %d other nodes' pod reservations in the cluster (running / started after)", n, n),
			measured: fmt.Sprintf("%.1f / %.1f MiB", mib(scoped.rss), mib(scopedLate.rss)), baseline: fmt.Sprintf("%.1f MiB before them", mib(idle.rss)),
			ratio: fmt.Sprintf("%.2fx", worstScoped/idle.rss), target: "<= 1.1x and <= 45 MiB", verdict: verdict(worstScoped <= 1.1*idle.rss && mib(worstScoped) <= 45)})

		network := fmt.Sprintf("mem-%d", i)
		b.StartTimer()
		start := time.Now()
		createMany(b, n, func(k int) *ipkeeperv1alpha1.IPReservation {
			return memReservation(network, netip.AddrFrom4([4]byte{10, byte(64 + i), byte(k >> 8), byte(k)}), k, reservation.NoBlock)
		})
		b.StopTimer()
		b.Logf("created %d reservations in %s (%.0f/s)", n, time.Since(start).Round(time.Second), float64(n)/time.Since(start).Seconds())
		want := cached0 + 1 + float64(n)
		if err := framework.Eventually(ctx, 2*time.Minute, 200*time.Millisecond, func(context.Context) (bool, error) {
			return sum(watcher.scrape(b), "ipkeeper_agent_reservations") >= want, nil
		}); err != nil {
			b.Fatalf("the agent did not cache %.0f reservations: %v", want, err)
		}
		settle()
		watched := memOf(b, watcher)
		stop()

		nodes, stop = startNodes(b, fmt.Sprintf("mem%d-late", i), 1)
		settle()
		listed := memOf(b, nodes[0])
		stop()

		per := func(m mem) float64 { return (m.live - scoped.live) / float64(n) }
		b.Logf("agent with %d reservations: filled by watch: RSS %.1f MiB, heap %.1f MiB (%.1f live at the last GC); filled by list: RSS %.1f MiB, heap %.1f MiB (%.1f live); "+
			"before, with %.0f cached: RSS %.1f MiB, heap %.1f MiB (%.1f live); live heap per added reservation %.0f B (watch), %.0f B (list); "+
			"with %d VMs and %d other nodes' pod reservations in the cluster besides (none cached): RSS %.1f MiB, heap %.1f MiB (%.1f live)",
			n, mib(watched.rss), mib(watched.heap), mib(watched.live), mib(listed.rss), mib(listed.heap), mib(listed.live),
			cached0, mib(idle.rss), mib(idle.heap), mib(idle.live), per(watched), per(listed), n, n, mib(scoped.rss), mib(scoped.heap), mib(scoped.live))
		worst := max(watched.rss, listed.rss)
		record(row{fig: 5, what: fmt.Sprintf("agent RSS, %d more reservations it caches (shared; watch / list)", n),
			measured: fmt.Sprintf("%.1f / %.1f MiB", mib(watched.rss), mib(listed.rss)), baseline: fmt.Sprintf("%.1f MiB before (%.0f cached)", mib(idle.rss), cached0),
			ratio: fmt.Sprintf("%.1fx", worst/idle.rss), target: "(context)"})
		record(row{fig: 5, what: "agent RSS: of it file-backed (the binary's pages; watch / list)",
			measured: fmt.Sprintf("%.1f / %.1f MiB", mib(watched.rssFile), mib(listed.rssFile)), baseline: fmt.Sprintf("%.1f MiB before", mib(idle.rssFile)),
			target: "(context)"})
		record(row{fig: 5, what: fmt.Sprintf("agent Go heap, %d more reservations it caches (watch / list)", n),
			measured: fmt.Sprintf("%.1f / %.1f MiB", mib(watched.heap), mib(listed.heap)), baseline: fmt.Sprintf("%.1f MiB before (%.0f cached)", mib(idle.heap), cached0),
			target: "(context)"})
		record(row{fig: 5, what: fmt.Sprintf("agent live heap at last GC, %d more reservations it caches (watch / list)", n),
			measured: fmt.Sprintf("%.1f / %.1f MiB", mib(watched.live), mib(listed.live)), baseline: fmt.Sprintf("%.1f MiB before", mib(idle.live)),
			ratio: fmt.Sprintf("%.0f / %.0f B per reservation", per(watched), per(listed)), target: "(context)"})
	}
}

// memReservation is the k-th pod reservation of network on another node,
// in that node's block or in none (shared: every agent caches it).
func memReservation(network string, ip netip.Addr, k int, block reservation.Block) *ipkeeperv1alpha1.IPReservation {
	return reservation.New(reservation.Params{Pool: naming.InlinePool(network), Key: network, Network: network, IP: ip,
		Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "bench",
			Name: fmt.Sprintf("pod-%d", k), UID: types.UID(fmt.Sprintf("uid-%d", k))},
		Interface: "net1", ContainerID: fmt.Sprintf("sandbox-%d", k), Node: fmt.Sprintf("mem-elsewhere-%d", k%1000),
		AttachedAt: &metav1.Time{Time: time.Now()}, Block: block})
}

// createVMs makes n VMs' IPAMClaims in ns and their reservations on
// network (ip(k) each), as ipkeeper-controller makes them: in its claims'
// blocks, owned by the claim.
func createVMs(b *testing.B, ns, network string, n int, ip func(k int) netip.Addr) {
	claims := make([]*ipamclaimsv1alpha1.IPAMClaim, n)
	runConcurrently(n, 64, func(k int) {
		claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("vm-%d.blue", k)},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: bootIf}}
		if err := cp.Client.Create(context.Background(), claim); err != nil {
			b.Errorf("creating IPAMClaim %d: %v", k, err)
			return
		}
		claims[k] = claim
	})
	if b.Failed() {
		b.FailNow()
	}
	createMany(b, n, func(k int) *ipkeeperv1alpha1.IPReservation {
		return claimReservation(network, network, ip(k), claims[k])
	})
}

// createMany creates n reservations, 64 at a time.
func createMany(b *testing.B, n int, obj func(k int) *ipkeeperv1alpha1.IPReservation) {
	runConcurrently(n, 64, func(k int) {
		if err := cp.Client.Create(context.Background(), obj(k)); err != nil {
			b.Errorf("creating reservation %d: %v", k, err)
		}
	})
}

// mem is an agent's memory: RSS, of which file-backed (the binary's pages,
// shared and reclaimable), Go heap, and live heap at the last collection.
type mem struct{ rss, rssFile, heap, live float64 }

func memOf(b *testing.B, n *node) mem {
	b.Helper()
	file, err := rssFile(n.proc.PID())
	if err != nil {
		b.Fatalf("reading /proc of %s: %v", n.name, err)
	}
	return mem{rss: n.stat(b).rss, rssFile: file, heap: sum(n.scrape(b), "go_memstats_heap_alloc_bytes"), live: liveHeap(n.proc.LogPath)}
}

// rssFile returns the file-backed part of a process's RSS, in bytes
// (RssFile of /proc/<pid>/status).
func rssFile(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %q of /proc/%d/status: %w", line, pid, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no RssFile", pid)
}

// gcLine matches the heap sizes of a gctrace line: "..., 10->11->5 MB, ...",
// at the start, at the end and live after the collection.
var gcLine = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

// liveHeap returns the live heap after the agent's last collection, in bytes
// (0 when its log has none).
func liveHeap(logPath string) float64 {
	raw, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	m := gcLine.FindAllSubmatch(raw, -1)
	if len(m) == 0 {
		return 0
	}
	mb, _ := strconv.ParseFloat(string(m[len(m)-1][3]), 64)
	return mb * 1e6 // gctrace's MB are 10^6 bytes
}

// settle lets an agent's start-up garbage be collected before its memory is read.
func settle() { time.Sleep(5 * time.Second) }
