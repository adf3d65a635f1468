// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

func TestLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cp, err := framework.Start(ctx, framework.Options{Lab: true, WithoutKubeVirtCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.DumpLogs(os.Stderr, 40)
		}
		_ = cp.Stop()
	})
	nodes := cp.StartRealNodes(ctx, t, 2)
	cp.InstallMultus(ctx, t, nodes)
	cp.InstallIpkeeper(ctx, t, nodes)
	out, _ := cp.Kubectl(ctx, nil, "get", "pods", "-A", "-o", "wide")
	t.Logf("%s", out)
}
