// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// agentWatch is one watch an agent of a node holds.
type agentWatch struct {
	resource string // as apiserver_longrunning_requests names it
	path     string
	params   url.Values
}

// agentWatches are the watches the agent of node holds (internal/node/agent:
// its reservation index's one watch, its node's blocks, its node's pods,
// and the pools and NADs its cache holds), in the format it asks for
// (JSON). The figure checks them against a real agent's
// (checkAgentWatches).
func agentWatches(node string) []agentWatch {
	return []agentWatch{
		{"ipreservations", "/apis/ipkeeper.io/v1alpha1/ipreservations", url.Values{"labelSelector": {naming.AgentReservationSelector(node)}}},
		{"ipblocks", "/apis/ipkeeper.io/v1alpha1/ipblocks", url.Values{"labelSelector": {naming.NodeLabel + "=" + naming.NodeLabelValue(node)}}},
		{"pods", "/api/v1/pods", url.Values{"fieldSelector": {"spec.nodeName=" + node}}},
		{"ippools", "/apis/ipkeeper.io/v1alpha1/ippools", url.Values{}},
		{"network-attachment-definitions", "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions", url.Values{}},
	}
}

// nodesPerConnection is how many watch-only nodes share one HTTP/2
// connection (each agent has its own; kube-apiserver serves up to 1,000
// streams on one).
const nodesPerConnection = 16

// watchOnlyNodes plays n nodes that hold exactly the watches an agent
// holds and do nothing else: each lists its resources once, as a reflector
// does, then watches from that list's resourceVersion with bookmarks, and
// reads and discards what it is sent. They stand for a large cluster's
// other agents, to measure what each node costs kube-apiserver and etcd
// per allocation. stop closes every watch.
func watchOnlyNodes(b *testing.B, prefix string, n int) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop = func() {
		cancel()
		wg.Wait()
	}
	var opened sync.WaitGroup
	var failMu sync.Mutex
	var failed error
	var client *http.Client
	// Opened at most openingAtOnce at a time, each retried as a
	// reflector retries: 5,000 lists at once overload the API server
	// (504), which is not what the figure measures.
	opening := make(chan struct{}, openingAtOnce)
	for i := range n {
		if i%nodesPerConnection == 0 {
			cfg := rest.CopyConfig(cp.Config)
			// A Proxy function keeps client-go from sharing one
			// transport (one connection) between these clients.
			cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
			var err error
			if client, err = rest.HTTPClientFor(cfg); err != nil {
				stop()
				b.Fatalf("watch-only nodes: %v", err)
			}
		}
		for _, w := range agentWatches(fmt.Sprintf("%s-%d", prefix, i)) {
			if only := watchOnlyResources(); only != nil && !slices.Contains(only, w.resource) {
				continue
			}
			wg.Add(1)
			opened.Add(1)
			go func(c *http.Client) {
				defer wg.Done()
				opening <- struct{}{}
				body, err := openWatchRetrying(ctx, c, w)
				<-opening
				opened.Done()
				if err != nil {
					failMu.Lock()
					failed = err
					failMu.Unlock()
					return
				}
				defer body.Close()
				_, _ = io.Copy(io.Discard, body)
			}(client)
		}
	}
	opened.Wait()
	if failed != nil {
		stop()
		b.Fatalf("watch-only nodes: %v", failed)
	}
	return stop
}

// watchOnlyResources is IPKEEPER_BENCH_WATCH_ONLY_RESOURCES, a comma-separated
// list of an agent's watched resources ("ipreservations,pods"), or nil when
// unset. When set, the watch-only nodes hold only those watches: an
// analysis of what each kind of watch costs per node, not a figure for the
// table (a node holds all of them).
func watchOnlyResources() []string {
	v := os.Getenv("IPKEEPER_BENCH_WATCH_ONLY_RESOURCES")
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// openingAtOnce bounds how many watch-only nodes' watches are being opened at once.
const openingAtOnce = 64

// openWatchRetrying is openWatch, tried again after an answer of an
// overloaded API server (429, 5xx) or a transport error, with a backoff,
// for up to two minutes.
func openWatchRetrying(ctx context.Context, c *http.Client, w agentWatch) (io.ReadCloser, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		body, err := openWatch(ctx, c, w)
		var st *statusError
		retry := err != nil && (!errors.As(err, &st) || st.code == http.StatusTooManyRequests || st.code >= 500)
		if !retry || time.Now().Add(delay).After(deadline) {
			return body, err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// statusError is an API server's answer other than 200 OK.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// openWatch lists w's resource (one item: the list is for its
// resourceVersion) and opens the watch from there.
func openWatch(ctx context.Context, c *http.Client, w agentWatch) (io.ReadCloser, error) {
	get := func(params url.Values) (*http.Response, error) {
		base, err := url.Parse(cp.Config.Host)
		if err != nil {
			return nil, err
		}
		u := base.JoinPath(w.path)
		if err != nil {
			return nil, err
		}
		u.RawQuery = params.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return nil, &statusError{resp.StatusCode, fmt.Sprintf("GET %s?%s: %s: %s", w.path, params.Encode(), resp.Status, msg)}
		}
		return resp, nil
	}
	list := url.Values{"limit": {"1"}}
	for k, v := range w.params {
		list[k] = v
	}
	resp, err := get(list)
	if err != nil {
		return nil, err
	}
	var meta struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	err = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", w.path, err)
	}
	watch := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {meta.Metadata.ResourceVersion},
		"timeoutSeconds": {fmt.Sprint(int((time.Hour).Seconds()))}}
	for k, v := range w.params {
		watch[k] = v
	}
	resp, err = get(watch)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// checkAgentWatches fails the figure unless the agents of nodes hold,
// by resource, the watches agentWatches plays (kube-apiserver's count of
// open watches with and without them): the watch-only nodes must stand for
// real ones.
func checkAgentWatches(b *testing.B, before map[string]float64, nodes int) {
	b.Helper()
	var after map[string]float64
	want := map[string]float64{}
	for _, w := range agentWatches("x") {
		want[w.resource] += float64(nodes)
	}
	// An agent opens its watches as its caches start; ready means synced.
	err := framework.Eventually(context.Background(), 30*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		after = openWatches(b)
		for res, n := range want {
			if after[res]-before[res] < n {
				return false, nil
			}
		}
		return true, nil
	})
	for res, n := range want {
		if got := after[res] - before[res]; got != n {
			b.Fatalf("%d agents hold %.0f watches of %s, the watch-only nodes play %.0f: agentWatches is out of date (%v)", nodes, got, res, n, err)
		}
	}
	for res, v := range after {
		if _, ok := want[res]; !ok && v-before[res] > 0 {
			b.Fatalf("%d agents hold %.0f watches of %s, which the watch-only nodes do not play: agentWatches is out of date", nodes, v-before[res], res)
		}
	}
}

// openWatches is kube-apiserver's count of open watches, by resource.
func openWatches(b *testing.B) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	mf := apiMetrics(b)["apiserver_longrunning_requests"]
	if mf == nil {
		b.Fatal("kube-apiserver reports no apiserver_longrunning_requests")
	}
	for _, m := range mf.GetMetric() {
		if !hasLabel(m, "verb", "WATCH") {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" {
				out[l.GetValue()] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}
