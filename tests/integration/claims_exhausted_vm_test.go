// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestExhaustedPoolIsToldOnTheVM: a VM whose network's pool has no free
// address learns it where its owner looks, from a Warning Event on the VM
// naming the claim and the reason, as well as from the claim's condition;
// the VM that holds the pool's address keeps it.
func TestExhaustedPoolIsToldOnTheVM(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	network := "full-" + e.ns
	e.nad(t, "blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.179.0.0/30"}}`, network)) // 2 usable
	var held []string
	for _, name := range []string{"vm-a", "vm-b"} {
		if _, err := e.kv.CreateVM(ctx, e.ns, name, framework.VMNetwork{Name: "blue", NAD: "blue"}); err != nil {
			t.Fatal(err)
		}
		var ips []string
		if err := framework.Eventually(ctx, 20*time.Second, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
			claim, err := e.claim(ctx, name+".blue")
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			ips = claim.Status.IPs
			return len(ips) == 1, nil
		}); err != nil {
			t.Fatalf("claim %s.blue not filled: %v", name, err)
		}
		held = append(held, ips[0])
	}
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm-full", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm-full.blue")
	waitCondition(t, e.ns, "vm-full.blue", "SubnetExhausted")
	waitEvent(t, vm, string(claimaddrs.ReasonIPsNotAllocated), "IPAMClaim vm-full.blue: SubnetExhausted")
	for i, name := range []string{"vm-a", "vm-b"} {
		if got := getClaim(t, e.ns, name+".blue").Status.IPs; len(got) != 1 || got[0] != held[i] {
			t.Fatalf("claim %s.blue records %v after the exhaustion, want %s", name, got, held[i])
		}
	}
}
