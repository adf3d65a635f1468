// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestAgentsWatchOnlyTheirNodesPodReservations: a node's agent hands out
// its pods' addresses from address blocks it took (IPBlocks owned by its
// Node) and labels their reservations with the node, so no other agent
// receives them. A shared reservation created after them (as a borrowed
// address's is) reaches every agent: once the other agent has it, it
// would have had the pod reservations before it, had they been sent to
// it.
func TestAgentsWatchOnlyTheirNodesPodReservations(t *testing.T) {
	c := setup(t)
	if len(c.Nodes) < 2 {
		t.Skip("needs two nodes")
	}
	home, other := c.Nodes[0], c.Nodes[1]
	ctx := context.Background()
	const network, pods = "e2e-blocks", 6
	subnet := netip.MustParsePrefix("10.77.9.0/24")
	list := bridgeNetwork(t, home, network, map[string]any{"range": subnet.String()})
	ns := c.NewNamespace(t, "e2e-blocks")
	c.Define(t, ns, list)

	homeBefore, otherBefore := cachedReservations(t, home), cachedReservations(t, other)
	var first *corev1.Pod
	for i := range pods {
		pod := c.CreatePod(t, ns, fmt.Sprintf("pod-%d", i), home.Name, "")
		if first == nil {
			first = pod
		}
		a := home.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+UniqueSuffix(6)), "net1", pod)
		if _, err := a.IPAMAdd(ctx, ""); err != nil {
			t.Fatalf("ADD %s: %v", a, err)
		}
		t.Cleanup(func() { _ = a.IPAMDel(context.Background(), "") })
	}

	node := &corev1.Node{}
	if err := c.CP.Client.Get(ctx, client.ObjectKey{Name: home.Name}, node); err != nil {
		t.Fatal(err)
	}
	var blocks ipkv1alpha1.IPBlockList
	if err := c.CP.Client.List(ctx, &blocks); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Reservations(t, network) {
		if got := r.Labels[naming.NodeLabel]; got != home.Name {
			t.Errorf("reservation %s of a pod on %s is labelled %s=%q", r.Name, home.Name, naming.NodeLabel, got)
		}
		ip := netip.MustParseAddr(r.Spec.IP)
		var in *ipkv1alpha1.IPBlock
		for i, b := range blocks.Items {
			if p, err := netip.ParsePrefix(b.Spec.CIDR); err == nil && p.Contains(ip) && b.Spec.Pool == r.Spec.Pool {
				in = &blocks.Items[i]
			}
		}
		switch {
		case in == nil:
			t.Errorf("%s lies in no IPBlock of pool %q", ip, r.Spec.Pool)
		case in.Spec.Node != home.Name:
			t.Errorf("%s lies in block %s of node %q, want %q", ip, in.Spec.CIDR, in.Spec.Node, home.Name)
		case len(in.OwnerReferences) != 1 || in.OwnerReferences[0].UID != node.UID:
			t.Errorf("block %s is owned by %+v, want Node %s (uid %s): the garbage collector gives back a deleted node's blocks", in.Name, in.OwnerReferences, node.Name, node.UID)
		}
	}

	// Shared, as borrowed addresses' are; its pod exists, so the
	// controller's GC leaves it alone.
	owner := ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerPod, Namespace: ns, Name: first.Name, UID: first.UID}
	marker := reservation.New(reservation.Params{Pool: "e2e-blocks-marker", Key: "e2e-blocks-marker", Network: "e2e-blocks-marker",
		IP: netip.MustParseAddr("10.77.10.1"), Owner: owner, Interface: "marker0", Node: home.Name})
	if got := marker.Labels[naming.NodeLabel]; got != naming.SharedNodeLabelValue {
		t.Fatalf("a reservation in no block is labelled %s=%q, want %q", naming.NodeLabel, got, naming.SharedNodeLabelValue)
	}
	if err := c.CP.Client.Create(ctx, marker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CP.Client.Delete(context.Background(), marker) })

	waitCached(t, other, otherBefore+1, "the shared marker only")
	waitCached(t, home, homeBefore+pods+1, "its pods' reservations and the marker")
	if got := cachedReservations(t, other); got != otherBefore+1 {
		t.Errorf("%s caches %.0f reservations, want %.0f: it received %s's pod reservations", other.Name, got, otherBefore+1, home.Name)
	}

}

// cachedReservations reads the agent's ipkeeper_agent_reservations gauge.
func cachedReservations(t testing.TB, n *Node) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.Agent.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("reading %s's metrics: %v", n.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ipkeeper_agent_reservations "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("parsing %q: %v", sc.Text(), err)
			}
			return f
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	t.Fatalf("%s's metrics have no ipkeeper_agent_reservations", n.Name)
	return 0
}

// waitCached polls until the agent caches want reservations.
func waitCached(t testing.TB, n *Node, want float64, what string) {
	t.Helper()
	var got float64
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		got = cachedReservations(t, n)
		return got == want, nil
	}); err != nil {
		t.Fatalf("%s caches %.0f reservations, want %.0f (%s): %v", n.Name, got, want, what, err)
	}
}
