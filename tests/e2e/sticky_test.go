// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestStickyMACPodGetsItsAddressBackOnAnotherNode runs pods through
// Multus -> bridge -> ipkeeper on a sticky_mac network whose pool has a
// reuse cooldown. A pod asking for a MAC (its networks element's "mac",
// which Multus passes as CNI_ARGS MAC) gets an address whose reservation
// records the MAC; once that pod is deleted, a new pod of the namespace
// asking for the MAC on another node gets the address back, and the
// interface has the MAC. A pod asking for another MAC gets another
// address. `kubectl get ipreservations -l ipkeeper.io/mac=...` finds the
// reservation. (The kubelet is simulated; Multus, bridge and the agents
// are real.)
func TestStickyMACPodGetsItsAddressBackOnAnotherNode(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "e2e-sticky")
	c.DumpOnFailure(t, ns)
	const pool, mac, otherMAC = "e2e-sticky", "02:00:00:89:00:01", "02:00:00:89:00:02"
	p := &ipkv1alpha1.IPPool{}
	p.Name = pool
	p.Spec.Ranges = []ipkv1alpha1.PoolRange{{Range: "10.89.0.0/28"}}
	p.Spec.ReuseCooldown = &ipkv1alpha1.Duration{Duration: time.Hour}
	if err := c.CP.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CP.Client.Delete(context.Background(), p) })
	c.BridgeNAD(t, ns, "sticky", "e2e-sticky-net", false, map[string]any{"pool": pool, "sticky_mac": true})
	pod := func(name, node, mac string) *corev1.Pod {
		return c.CreatePod(t, ns, name, node, fmt.Sprintf(`[{"name":"sticky","interface":"net1","mac":%q}]`, mac))
	}
	withMAC := func(ctx context.Context) ([]ipkv1alpha1.IPReservation, error) {
		var list ipkv1alpha1.IPReservationList
		err := c.CP.Client.List(ctx, &list, client.MatchingLabels{macaddr.Label: strings.ReplaceAll(mac, ":", "-")})
		return list.Items, err
	}

	first := pod("first", "node-a", mac)
	s1 := c.MustRun(t, first)
	x := s1.MustAddr(t, "net1")
	if got := s1.MustMAC(t, "net1"); got != mac {
		t.Fatalf("first pod's net1 has MAC %s, want %s", got, mac)
	}
	rs, err := withMAC(ctx)
	if err != nil || len(rs) != 1 || rs[0].Spec.Owner.UID != first.UID || rs[0].Spec.IP != x.Addr().String() {
		t.Fatalf("reservations labelled with %s: %+v, %v; want the first pod's of %s", mac, rs, err, x)
	}

	if err := c.CP.Client.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		rs, err := withMAC(ctx)
		return err == nil && len(rs) == 1 && rs[0].Spec.Released(), err
	}); err != nil {
		t.Fatalf("the first pod's reservation was never released into its cooldown: %v", err)
	}

	second := pod("second", "node-b", mac)
	s2 := c.MustRun(t, second)
	if got := s2.MustAddr(t, "net1"); got != x {
		t.Fatalf("a pod asking for MAC %s on node-b got %s, want %s back (released by the first pod on node-a)", mac, got, x)
	}
	if got := s2.MustMAC(t, "net1"); got != mac {
		t.Errorf("second pod's net1 has MAC %s, want %s", got, mac)
	}
	rs, err = withMAC(ctx)
	if err != nil || len(rs) != 1 || rs[0].Spec.Owner.UID != second.UID || rs[0].Spec.Node != "node-b" || rs[0].Spec.Released() {
		t.Fatalf("reservations labelled with %s: %+v, %v; want the second pod's, on node-b, in use", mac, rs, err)
	}

	s3 := c.MustRun(t, pod("third", "node-b", otherMAC))
	if got := s3.MustAddr(t, "net1"); got == x {
		t.Fatalf("a pod asking for another MAC got %s, the address of %s", got, mac)
	}

	out, err := c.CP.Kubectl(ctx, nil, "get", "ipreservations", "-l", macaddr.Label+"="+strings.ReplaceAll(mac, ":", "-"), "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if names := strings.Fields(string(out)); len(names) != 1 || names[0] != "ipreservation.ipkeeper.io/"+rs[0].Name {
		t.Errorf("kubectl get ipreservations -l %s=...: %q, want only %s", macaddr.Label, out, rs[0].Name)
	}
}
