// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// BenchmarkExhaustion (figure 6): a full /24, then 500 ADDs retried against
// it (125 pending pods, each retried 4 times with a new sandbox, as a
// kubelet does), 32 in flight over 4 agent processes. Counts the API
// server's requests (apiserver_request_total) per retried ADD, against the
// requests per successful ADD while the range filled, in the same run.
func BenchmarkExhaustion(b *testing.B) {
	const agents, fill, pending, retries = 4, 260, 125, 4
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx := context.Background()
		nodes, stop := startNodes(b, fmt.Sprintf("exh%d-node", i), agents)
		ns := cp.NewNamespace(b, "exhaust")
		pods, owner := createPodsOn(b, ns, nodes, (fill+pending+agents-1)/agents)
		conf := framework.NetConf(fmt.Sprintf("exhaust-%d", i), map[string]any{"range": "10.133.0.0/24"})
		cp.InlinePool(b, ns, conf) // no ipkeeper-controller here: the pool it makes from the NAD

		// Fill the range; the ADDs past its end fail as exhausted.
		before := apiMetrics(b)
		var ok atomic.Int64
		runConcurrently(fill, stormInFlight, func(k int) {
			if err := owner[k].add(ctx, pods[k], framework.SandboxID(pods[k]), conf); err == nil {
				ok.Add(1)
			}
		})
		filled := apiMetrics(b)
		fillReqs := requests(filled) - requests(before)
		perOK := fillReqs / float64(ok.Load())

		// The retry storm.
		rest, restOwner := pods[fill:fill+pending], owner[fill:fill+pending]
		n := len(rest) * retries
		var succeeded atomic.Int64
		b.StartTimer()
		start := time.Now()
		runConcurrently(n, stormInFlight, func(k int) {
			p, nd := rest[k%len(rest)], restOwner[k%len(rest)]
			if err := nd.add(ctx, p, fmt.Sprintf("%s-retry-%d", framework.SandboxID(p), k/len(rest)), conf); err == nil {
				succeeded.Add(1)
			}
		})
		elapsed := time.Since(start)
		b.StopTimer()
		after := apiMetrics(b)
		stop()
		if succeeded.Load() > 0 {
			b.Errorf("%d ADDs succeeded on a full range", succeeded.Load())
		}
		total := requests(after) - requests(filled)
		reads := requests(after, "verb", "GET") + requests(after, "verb", "LIST") -
			requests(filled, "verb", "GET") - requests(filled, "verb", "LIST")
		fn := float64(n)
		b.Logf("filled a /24 with %d addresses (%d ADDs, %.1f API requests per successful ADD); "+
			"%d retried ADDs in %s (%.0f/s): %.0f API requests (%.2f per ADD, of which %.2f reads)",
			ok.Load(), fill, perOK, n, elapsed.Round(time.Millisecond), fn/elapsed.Seconds(), total, total/fn, reads/fn)
		record(row{fig: 6, what: fmt.Sprintf("API requests per retried ADD on a full /24 (%d ADDs)", n),
			measured: fmt.Sprintf("%.2f (%.2f reads)", total/fn, reads/fn), baseline: fmt.Sprintf("%.2f per successful ADD", perOK),
			ratio: fmt.Sprintf("%.2fx", total/fn/perOK), target: "O(1) reads (<= 1 read/ADD)", verdict: verdict(reads/fn <= 1)})
	}
}

// requests sums apiserver_request_total over the series with the given
// labels, leaving out WATCH (long-running: counted when a watch starts).
func requests(mfs map[string]*dto.MetricFamily, where ...string) float64 {
	return sum(mfs, "apiserver_request_total", where...) -
		sum(mfs, "apiserver_request_total", append([]string{"verb", "WATCH"}, where...)...)
}
