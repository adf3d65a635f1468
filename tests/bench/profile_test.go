// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
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

// profileAPIServerOf is profileAPIServer for control plane c's kube-apiserver.
func profileAPIServerOf(b *testing.B, c *framework.ControlPlane, phase string) (done func()) {
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
		data, err := c.Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(profileSeconds)).Timeout(2 * profileSeconds * time.Second).DoRaw(context.Background())
		ch <- result{data, err}
	}()
	return func() {
		r := <-ch
		if r.err != nil {
			b.Fatalf("profiling the kube-apiserver (%s): %v", phase, r.err)
		}
		path := filepath.Join(dir, fmt.Sprintf("kube-apiserver-%s.pprof", phase))
		if err := os.WriteFile(path, r.data, 0o644); err != nil {
			b.Fatalf("writing %s: %v", path, err)
		}
		b.Logf("kube-apiserver CPU profile of %s: %s", phase, path)
	}
}
