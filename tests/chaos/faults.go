// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// injector runs the fault schedule while operations run.
type injector struct {
	r     *runner
	c     *cluster
	sched *faultScheduler
	wg    sync.WaitGroup // restarts in progress
}

// run injects faults until ctx ends. Waits between faults are part of the
// seeded schedule (the schedule's clock, not synchronisation).
func (f *injector) run(ctx context.Context) {
	for {
		ft := f.sched.next()
		select {
		case <-ctx.Done():
			return
		case <-time.After(ft.wait):
		}
		f.inject(ctx, ft)
	}
}

func (f *injector) inject(ctx context.Context, ft fault) {
	c, r := f.c, f.r
	target := ""
	switch ft.kind {
	case fAgentKill:
		target = c.nodes[ft.target%numNodes].name
	case fProxyBurst:
		target = burstKinds[ft.target%len(burstKinds)].String()
	}
	seq := r.hist.begin(0, "fault", ft.kind.String()+" "+target)
	result := "done"
	switch ft.kind {
	case fAgentKill:
		n := c.nodes[ft.target%numNodes]
		if up, _ := n.state(); !up {
			result = "skipped: agent still restarting"
			break
		}
		r.counts.inc("fault:" + ft.kind.String())
		f.async(func() error { return c.restartAgent(context.WithoutCancel(ctx), n) })
	case fControllerKill:
		c.ctrl.mu.Lock()
		up := c.ctrl.up
		c.ctrl.mu.Unlock()
		if !up {
			result = "skipped: controller still restarting"
			break
		}
		r.counts.inc("fault:" + ft.kind.String())
		f.async(func() error { return c.restartController(context.WithoutCancel(ctx)) })
	case fAPIServerRestart:
		r.counts.inc("fault:" + ft.kind.String())
		killed, err := c.restartAPIServer(ctx)
		switch {
		case err != nil:
			result = err.Error()
			r.harnessError(err)
		case killed:
			result = fmt.Sprintf("killed after %s of graceful shutdown, started again", apiStopTimeout)
		}
	case fWatchExpiry:
		rev, err := compactEtcd(ctx, c.cp.EtcdURL())
		if err != nil {
			result = err.Error()
			r.harnessError(err)
			break
		}
		r.counts.inc("fault:" + ft.kind.String())
		result = fmt.Sprintf("compacted at revision %d, cut %d watches", rev, c.proxy.cutWatches())
	case fWatchCut:
		r.counts.inc("fault:" + ft.kind.String())
		result = fmt.Sprintf("cut %d watches", c.proxy.cutWatches())
	case fProxyBurst:
		r.counts.inc("fault:" + ft.kind.String())
		c.proxy.startBurst(burstKinds[ft.target%len(burstKinds)], ft.length)
		result = "for " + ft.length.String()
	}
	r.hist.end(seq, result)
}

var burstKinds = []proxyFault{pfDrop, pfDelay, pf429, pf500, pfExpire}

// async runs a restart in the background; a restart that fails leaves a
// process down, which voids the run.
func (f *injector) async(fn func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := fn(); err != nil {
			f.r.harnessError(fmt.Errorf("restarting after a fault: %w", err))
		}
	}()
}

// compactEtcd compacts etcd's history up to its current revision through
// etcd's v3 JSON gateway, so watches resuming from an older revision get
// 410 Gone and clients must re-list.
func compactEtcd(ctx context.Context, etcdURL string) (int64, error) {
	var rangeResp struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	// Any key: only the response header's revision is wanted.
	if err := etcdPost(ctx, etcdURL+"/v3/kv/range", map[string]any{"key": "Lw==", "limit": "1"}, &rangeResp); err != nil {
		return 0, err
	}
	rev := rangeResp.Header.Revision
	err := etcdPost(ctx, etcdURL+"/v3/kv/compaction", map[string]any{"revision": fmt.Sprint(rev), "physical": true}, nil)
	if err != nil && !strings.Contains(err.Error(), "required revision has been compacted") {
		// (kube-apiserver compacts too; a race with it is harmless)
		return 0, err
	}
	return rev, nil
}

func etcdPost(ctx context.Context, url string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: HTTP %d: %s", url, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("etcd %s: decoding %s: %w", url, data, err)
		}
	}
	return nil
}
