// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

const (
	sideBySideADDs     = 1000
	sideBySideInFlight = 32
	sideBySideAgents   = 4
)

// BenchmarkWhereabouts (figure 3): ADDs as a runtime makes them, each an
// exec'd IPAM plugin, 32 in flight: the ipkeeper shim (through 4 agent
// processes) and, against the same API server and the same pods,
// whereabouts v0.9.4 (hack/tools.sh whereabouts) with its own CRDs and its
// default settings. Whereabouts serialises every allocation cluster-wide
// behind one Lease, so it runs at a few ADDs per second: it stops issuing
// ADDs after IPKEEPER_BENCH_WHEREABOUTS_CAP (default 3m) and reports the
// rate and latencies of those it made.
func BenchmarkWhereabouts(b *testing.B) {
	if whereaboutsDir == "" {
		b.Skip("whereabouts is not built: run `bash hack/tools.sh whereabouts` (make bench does), with IPKEEPER_WHEREABOUTS_DIR set as hack/tools.sh --env prints it")
	}
	capAfter := 3 * time.Minute
	if v := os.Getenv("IPKEEPER_BENCH_WHEREABOUTS_CAP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("IPKEEPER_BENCH_WHEREABOUTS_CAP: %v", err)
		}
		capAfter = d
	}
	n := sideBySideADDs
	if testing.Short() {
		n, capAfter = 100, 30*time.Second
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bin := binaries(b)
		ctx := context.Background()
		nodes, stop := startNodes(b, fmt.Sprintf("sbs%d-node", i), sideBySideAgents)
		ns := cp.NewNamespace(b, "sidebyside")
		pods, owner := createPodsOn(b, ns, nodes, (n+sideBySideAgents-1)/sideBySideAgents)
		pods, owner = pods[:n], owner[:n]

		confs := make(map[*node][]byte, len(nodes))
		for _, nd := range nodes {
			confs[nd] = framework.NetConf(fmt.Sprintf("sbs-%d", i), map[string]any{"range": "10.134.0.0/20"})
		}
		cp.InlinePool(b, ns, confs[nodes[0]]) // no ipkeeper-controller here: the pool it makes from the NAD
		ipk := execStorm(b, n, 0, false, func(k int) error {
			_, err := execPlugin(ctx, bin.Shim, "ADD", owner[k].proc.Socket, pods[k], confs[owner[k]])
			return err
		})
		stop()

		// Whereabouts insists on its flat configuration file, which its
		// DaemonSet writes on every node (/etc/cni/net.d/whereabouts.d).
		flat := filepath.Join(workDir, "whereabouts.conf")
		if err := os.WriteFile(flat, []byte(`{"datastore":"kubernetes","kubernetes":{"kubeconfig":"`+cp.KubeconfigPath+`"}}`), 0o600); err != nil {
			b.Fatal(err)
		}
		wbConf, err := json.Marshal(map[string]any{"cniVersion": "0.3.1", "name": fmt.Sprintf("wb-%d", i), "type": "bridge",
			"ipam": map[string]any{"type": "whereabouts", "range": "10.135.0.0/20", "configuration_path": flat,
				"kubernetes": map[string]any{"kubeconfig": cp.KubeconfigPath}}})
		if err != nil {
			b.Fatal(err)
		}
		// A whereabouts ADD that gives up waiting for its lease is its
		// behaviour under load, which a runtime retries: counted, not a failure here.
		wb := execStorm(b, n, capAfter, true, func(k int) error {
			_, err := execPlugin(ctx, filepath.Join(whereaboutsDir, "whereabouts"), "ADD", "", pods[k], wbConf)
			return err
		})

		b.Logf("exec'd ADDs, %d in flight, same pods: ipkeeper %d/%d in %s: %.1f/s, p50 %.1f ms, p99 %.1f ms; "+
			"whereabouts v0.9.4 %d/%d in %s (%d failed, first: %.200v): %.1f/s, p50 %.1f ms, p99 %.1f ms; rate ratio %.1fx, p99 ratio %.1fx",
			sideBySideInFlight, ipk.done, n, ipk.elapsed.Round(time.Millisecond), ipk.rate(), ms(ipk.p50), ms(ipk.p99),
			wb.done, n, wb.elapsed.Round(time.Millisecond), wb.failed, wb.firstErr, wb.rate(), ms(wb.p50), ms(wb.p99), ipk.rate()/wb.rate(), float64(wb.p99)/float64(ipk.p99))
		of := func(s stormResult) string {
			out := strconv.Itoa(s.done)
			if s.done+s.failed < n {
				out = fmt.Sprintf("%d of %d in the %s cap", s.done, n, capAfter)
			}
			if s.failed > 0 {
				out += fmt.Sprintf(", %d failed", s.failed)
			}
			return out
		}
		record(row{fig: 3, what: fmt.Sprintf("exec'd ADDs, %d in flight: rate (ipkeeper %s, whereabouts %s)", sideBySideInFlight, of(ipk), of(wb)),
			measured: fmt.Sprintf("%.1f/s", ipk.rate()), baseline: fmt.Sprintf("%.1f/s whereabouts v0.9.4", wb.rate()),
			ratio: fmt.Sprintf("%.1fx", ipk.rate()/wb.rate()), target: ">= 30x", verdict: verdict(ipk.rate()/wb.rate() >= 30)})
		record(row{fig: 3, what: "exec'd ADDs: p50 / p99",
			measured: fmt.Sprintf("%.0f / %.0f ms", ms(ipk.p50), ms(ipk.p99)), baseline: fmt.Sprintf("%.0f / %.0f ms whereabouts", ms(wb.p50), ms(wb.p99)),
			ratio: fmt.Sprintf("p99 %.1fx lower", float64(wb.p99)/float64(ipk.p99)), target: "p99 >= 20x lower", verdict: verdict(float64(wb.p99)/float64(ipk.p99) >= 20)})
	}
}

type stormResult struct {
	done, failed int
	firstErr     error
	elapsed      time.Duration
	p50, p99     time.Duration
}

func (s stormResult) rate() float64 { return float64(s.done) / s.elapsed.Seconds() }

// execStorm runs add(0..n-1), sideBySideInFlight at once, and times them;
// with a cap, no ADD starts after it (those started finish). Failed ADDs
// fail b unless tolerated; they are counted either way, and left out of
// the rate and the latencies.
func execStorm(b *testing.B, n int, capAfter time.Duration, tolerate bool, add func(k int) error) stormResult {
	b.Helper()
	latencies := make([]time.Duration, n)
	var done, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	b.StartTimer()
	start := time.Now()
	runConcurrently(n, sideBySideInFlight, func(k int) {
		if capAfter > 0 && time.Since(start) > capAfter {
			return
		}
		t0 := time.Now()
		if err := add(k); err != nil {
			firstErr.CompareAndSwap(nil, &err)
			if failed.Add(1) <= 3 && !tolerate {
				b.Errorf("ADD %d: %v", k, err)
			}
			return
		}
		latencies[k] = time.Since(t0)
		done.Add(1)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	lat := slices.DeleteFunc(latencies, func(d time.Duration) bool { return d == 0 })
	slices.Sort(lat)
	var first error
	if p := firstErr.Load(); p != nil {
		first = *p
	}
	return stormResult{done: int(done.Load()), failed: int(failed.Load()), firstErr: first, elapsed: elapsed,
		p50: percentile(lat, 50), p99: percentile(lat, 99)}
}
