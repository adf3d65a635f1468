// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// profileSeconds is how long each kube-apiserver CPU profile runs: longer
// than any profiled phase on two cores (a phase that outlasts it is
// profiled only in part).
const profileSeconds = 20

// profileAPIServer starts, when IPKEEPER_BENCH_PROFILE_DIR is set, a CPU
// profile of the kube-apiserver (its /debug/pprof/profile) and returns a
// function that waits for it to end and writes it to
// <dir>/kube-apiserver-<phase>.pprof. Profiling slows the API server: a run
// with profiles is for reading them, not for the table.
func profileAPIServer(b *testing.B, phase string) (done func()) {
	return profileAPIServerOf(b, cp, phase)
}

// profileAPIServerIf is profileAPIServer of phase, and nothing for "".
func profileAPIServerIf(b *testing.B, phase string) (done func()) {
	if phase == "" {
		return func() {}
	}
	return profileAPIServer(b, phase)
}

// profileAPIServerOf is profileAPIServer for control plane c's kube-apiserver.
func profileAPIServerOf(b *testing.B, c *framework.ControlPlane, phase string) (done func()) {
	return profileInto(b, "kube-apiserver", fmt.Sprintf("kube-apiserver-%s.pprof", phase), phase, func() ([]byte, error) {
		return c.Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(profileSeconds)).Timeout(2 * profileSeconds * time.Second).DoRaw(context.Background())
	})
}

// profileAgent starts, when IPKEEPER_BENCH_PROFILE_DIR is set, a CPU
// profile of agent process nd (started with --profiling-bind-address) and
// returns a function that waits for it to end and writes it to
// <dir>/agent-<phase>-<node>.pprof (go tool pprof merges several).
func profileAgent(b *testing.B, nd *node, phase string) (done func()) {
	return profileProcess(b, "agent "+nd.name, nd.pprof, fmt.Sprintf("agent-%s-%s.pprof", phase, nd.name), phase)
}

// profileProcess starts a CPU profile of the process whose /debug/pprof/
// is at url (a daemon started with --profiling-bind-address; nothing for
// ""), written to file as profileInto does.
func profileProcess(b *testing.B, what, url, file, phase string) (done func()) {
	if url == "" {
		return func() {}
	}
	return profileInto(b, what, file, phase, func() ([]byte, error) {
		c := &http.Client{Timeout: 2 * profileSeconds * time.Second}
		resp, err := c.Get(fmt.Sprintf("%sprofile?seconds=%d", url, profileSeconds))
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, data)
		}
		return data, err
	})
}

// traceAgent starts, when IPKEEPER_BENCH_PROFILE_DIR is set, an execution
// trace of agent process nd (runtime/trace, via its /debug/pprof/trace) of
// seconds, and returns a function that waits for it to end and writes it
// to <dir>/agent-<phase>-<node>.trace: where a short phase's wall time
// goes (network, scheduling, GC), which a CPU profile does not show.
func traceAgent(b *testing.B, nd *node, phase string, seconds float64) (done func()) {
	if nd.pprof == "" {
		return func() {}
	}
	return profileInto(b, "agent "+nd.name+" (trace)", fmt.Sprintf("agent-%s-%s.trace", phase, nd.name), phase, func() ([]byte, error) {
		c := &http.Client{Timeout: time.Duration(2*seconds)*time.Second + 10*time.Second}
		resp, err := c.Get(fmt.Sprintf("%strace?seconds=%g", nd.pprof, seconds))
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, data)
		}
		return data, err
	})
}

// profileInto runs fetch (a CPU profile of what) now, when
// IPKEEPER_BENCH_PROFILE_DIR is set, and returns a function that waits for
// it and writes it to that directory as file.
func profileInto(b *testing.B, what, file, phase string, fetch func() ([]byte, error)) (done func()) {
	dir := os.Getenv("IPKEEPER_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	type result struct {
		data []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		data, err := fetch()
		ch <- result{data, err}
	}()
	return func() {
		r := <-ch
		if r.err != nil {
			b.Fatalf("profiling %s (%s): %v", what, phase, r.err)
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, r.data, 0o644); err != nil {
			b.Fatalf("writing %s: %v", path, err)
		}
		b.Logf("CPU profile of %s in %s: %s", what, phase, path)
	}
}
