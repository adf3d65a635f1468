// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// createPool creates an IPPool as an administrator would and removes it
// when the test ends.
func createPool(t testing.TB, name string, ranges ...ipkeeperv1alpha1.PoolRange) *ipkeeperv1alpha1.IPPool {
	t.Helper()
	p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: ranges}}
	if err := cp.Client.Create(context.Background(), p); err != nil {
		t.Fatalf("creating IPPool %s: %v", name, err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), p) })
	return p
}

// setPoolRanges replaces a pool's ranges, as `kubectl edit ippool` would
// (again on a conflict: the status controller writes the pool too).
func setPoolRanges(t testing.TB, name string, ranges ...ipkeeperv1alpha1.PoolRange) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &ipkeeperv1alpha1.IPPool{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return err
		}
		p.Spec.Ranges = ranges
		return cp.Client.Update(ctx, p)
	}); err != nil {
		t.Fatalf("updating IPPool %s: %v", name, err)
	}
}

func poolConf(network, pool string) []byte {
	return framework.NetConf(network, map[string]any{"pool": pool})
}

// addUntil retries an ADD until it returns what ok accepts: the agent sees
// a pool edit through its informer, a moment after the API server has it.
func addUntil(t testing.TB, a *framework.Agent, ns, prefix string, conf []byte, ok func([]netip.Addr, error) bool) []netip.Addr {
	t.Helper()
	ctx := context.Background()
	var got []netip.Addr
	var last error
	n := 0
	if err := framework.Eventually(ctx, 15*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		n++
		pod := cp.CreatePods(t, ns, a.Node, prefix+"-"+string(rune('a'+n%26))+strings.Repeat("x", n/26), 1)[0]
		res, err := a.Add(ctx, pod, "net1", conf)
		got, last = nil, err
		if err == nil {
			for _, ip := range res.IPs {
				a, _ := netip.AddrFromSlice(ip.Address.IP)
				got = append(got, a.Unmap())
			}
		}
		return ok(got, err), nil
	}); err != nil {
		t.Fatalf("ADD never gave what the test waits for: last %v, %v", got, last)
	}
	return got
}

// TestPoolGrowsAndShrinksLive: a range added to an IPPool is handed out at
// once by a running agent; a range removed stops new allocations there,
// while the addresses held there stay held (a re-ADD of their attachment
// gets them back), and no one else gets them.
func TestPoolGrowsAndShrinksLive(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "poolgrow")
	const pool = "grow-pool"
	createPool(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.91.0.0/30"}) // 2 usable
	conf := poolConf("grow-net", pool)
	a := cp.StartAgent(t, "node-grow")
	held := cp.CreatePods(t, ns, a.Node, "held", 2)
	var first []netip.Addr
	for _, p := range held {
		res, err := a.Add(ctx, p, "net1", conf)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, resultIPs(t, res)...)
	}
	late := cp.CreatePods(t, ns, a.Node, "late", 1)[0]
	if _, err := a.Add(ctx, late, "net1", conf); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("third ADD on a 2-address pool: %v, want exhausted", err)
	}

	setPoolRanges(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.91.0.0/30"}, ipkeeperv1alpha1.PoolRange{Range: "10.91.1.0/30", Gateway: "10.91.1.1"})
	grown := addUntil(t, a, ns, "grown", conf, func(ips []netip.Addr, err error) bool { return err == nil })
	if got := grown[0].String(); got != "10.91.1.2" {
		t.Fatalf("ADD after growth = %s, want 10.91.1.2 (the new range, its gateway skipped)", got)
	}

	// Shrink: drop the first range.
	setPoolRanges(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.91.1.0/29", Gateway: "10.91.1.1"})
	after := addUntil(t, a, ns, "shrunk", conf, func(ips []netip.Addr, err error) bool {
		return err == nil && strings.HasPrefix(ips[0].String(), "10.91.1.")
	})
	for _, ip := range after {
		for _, f := range first {
			if ip == f {
				t.Fatalf("%s was handed out again while held", ip)
			}
		}
	}
	// The held attachments keep their addresses.
	for i, p := range held {
		res, err := a.Add(ctx, p, "net1", conf)
		if err != nil {
			t.Fatalf("re-ADD of a held attachment after its range was removed: %v", err)
		}
		if got := resultIPs(t, res)[0]; got != first[i] {
			t.Errorf("re-ADD of %s got %s, want its held %s", p.Name, got, first[i])
		}
		r := &ipkeeperv1alpha1.IPReservation{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: naming.Reservation(pool, first[i])}, r); err != nil {
			t.Errorf("the reservation of %s is gone after the shrink: %v", first[i], err)
		}
	}
}

// TestDisagreeingNADsOfOneNetwork: the first NAD of an inline network
// defines its pool (ipkeeper-controller makes it from the NAD); a second
// NAD of the same network name whose ranges differ (another gateway here)
// gets a Warning event naming both definitions, and an ADD through it is
// refused with a configuration error that names them, allocating nothing.
func TestDisagreeingNADsOfOneNetwork(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "disagree")
	const network = "disagree-net"
	first := framework.NetConf(network, map[string]any{"range": "10.92.0.0/24", "gateway": "10.92.0.1"})
	second := framework.NetConf(network, map[string]any{"range": "10.92.0.0/24", "gateway": "10.92.0.254"})
	startClaimController(t, ns)
	cp.CreateNAD(t, ns, "first", first)
	pool, err := cp.WaitPool(ctx, network)
	if err != nil {
		t.Fatalf("the inline network has no IPPool: %v", err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	if pool.Labels[ipkeeperv1alpha1.InlineLabel] != "true" || len(pool.Spec.Ranges) != 1 || pool.Spec.Ranges[0].Gateway != "10.92.0.1" ||
		pool.Annotations[ipkeeperv1alpha1.DefinedByAnnotation] != "NAD "+ns+"/first" {
		t.Errorf("inline pool %+v %+v %+v, want the first NAD's definition", pool.Labels, pool.Annotations, pool.Spec)
	}
	nad := cp.CreateNAD(t, ns, "second", second)
	waitEvent(t, nad, string(inlinepool.ReasonDisagrees), "gateway 10.92.0.254")

	a := cp.StartAgent(t, "node-disagree")
	pods := cp.CreatePods(t, ns, a.Node, "p", 2)
	if _, err := a.Add(ctx, pods[0], "net1", first); err != nil {
		t.Fatal(err)
	}
	before := len(reservationsOf(t, network))
	_, err = a.Add(ctx, pods[1], "net1", second)
	if cniCode(err) != types.ErrInvalidNetworkConfig {
		t.Fatalf("ADD through the disagreeing NAD = %v (code %d), want code 7", err, cniCode(err))
	}
	mustContain(t, err, `network "disagree-net"`, `IPPool "disagree-net"`, "gateway 10.92.0.1", "gateway 10.92.0.254")
	if n := len(reservationsOf(t, network)); n != before {
		t.Errorf("%d reservations after the refused ADD, want %d", n, before)
	}
}

// TestClaimAddressLeavingItsPoolIsReported: a VM runs on (no CNI ADD) while
// its claim's address leaves the pool; the controller sets
// AddressesInPool=False naming the address, the reservation stays, and the
// condition turns True when the range comes back.
func TestClaimAddressLeavingItsPoolIsReported(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "inpool")
	const pool = "inpool-pool"
	createPool(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.94.0.0/24"})
	cp.StartController(t, ns, func(o *manager.Options) { o.EnableWebhook = false })
	claim := createClaim(t, ns, "vm1.inpool", "inpool-net")
	r := newReservation("inpool-net", "10.94.0.7")
	r.Name = naming.Reservation(pool, netip.MustParseAddr("10.94.0.7"))
	r.Spec.Pool, r.Spec.InterfaceName, r.Spec.ContainerID, r.Spec.Node = pool, "", "", ""
	r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID}
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	claim.Status.IPs = []string{"10.94.0.7/24"}
	if err := cp.Client.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	waitInPool := func(want metav1.ConditionStatus, msg string) {
		t.Helper()
		var got *metav1.Condition
		if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
			got = meta.FindStatusCondition(getClaim(t, ns, claim.Name).Status.Conditions, claimstatus.ConditionInPool)
			return got != nil && got.Status == want && strings.Contains(got.Message, msg), nil
		}); err != nil {
			t.Fatalf("AddressesInPool = %+v, want %s mentioning %q", got, want, msg)
		}
	}
	setPoolRanges(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.94.0.0/24", Exclude: []string{"10.94.0.0/28"}})
	waitInPool(metav1.ConditionFalse, "10.94.0.7")
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), &ipkeeperv1alpha1.IPReservation{}); err != nil {
		t.Fatalf("the claim's reservation went when its address left the pool: %v", err)
	}
	setPoolRanges(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.94.0.0/24"})
	waitInPool(metav1.ConditionTrue, pool)
}

// TestOverlappingInlineNetworksRefused: whereabouts shares addresses
// between NADs of different names and one range; here each inline network
// has its own pool, so ipkeeper-controller makes no pool for a second
// network whose range overlaps the first's (a Warning event on its NAD
// says why), and an ADD through it is refused with a configuration error
// naming the first network's pool, allocating nothing. The first network
// keeps all its addresses: the refused one left no object behind. A
// network that declares its own ipam.network_name (a separate L2 network
// reusing the range) is not refused.
func TestOverlappingInlineNetworksRefused(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "overlap")
	first := framework.NetConf("overlap-a", map[string]any{"range": "10.96.0.0/30"}) // 2 usable
	second := framework.NetConf("overlap-b", map[string]any{"range": "10.96.0.0/25"})
	separate := framework.NetConf("overlap-c", map[string]any{"range": "10.96.0.0/24", "network_name": "tenant-c"})
	startClaimController(t, ns)
	for _, name := range []string{"overlap-a", "overlap-b", "overlap-c"} {
		p := &ipkeeperv1alpha1.IPPool{}
		p.Name = name
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), p) })
	}
	cp.CreateNAD(t, ns, "a", first)
	if _, err := cp.WaitPool(ctx, "overlap-a"); err != nil {
		t.Fatal(err)
	}
	nadB := cp.CreateNAD(t, ns, "b", second)
	waitEvent(t, nadB, string(inlinepool.ReasonNetworksOverlap), `IPPool "overlap-a"`)
	cp.CreateNAD(t, ns, "c", separate)
	if _, err := cp.WaitPool(ctx, "overlap-c"); err != nil {
		t.Fatalf("a network with its own network_name: %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: "overlap-b"}, &ipkeeperv1alpha1.IPPool{}); err == nil {
		t.Fatalf("the controller made a pool for the refused, overlapping network overlap-b")
	}

	a := cp.StartAgent(t, "node-overlap")
	pods := cp.CreatePods(t, ns, a.Node, "p", 4)
	_, err := a.Add(ctx, pods[0], "net1", second)
	if cniCode(err) != types.ErrInvalidNetworkConfig {
		t.Fatalf("ADD on an overlapping network = %v (code %d), want code 7", err, cniCode(err))
	}
	mustContain(t, err, `network "overlap-b"`, `IPPool "overlap-a"`, "network_name", "docs/migrating-from-whereabouts.md")
	if n := len(reservationsOf(t, "overlap-b")); n != 0 {
		t.Errorf("the refused network holds %d reservations", n)
	}
	// Every address of the first network is still its own to hand out.
	for _, p := range pods[1:3] {
		if _, err := a.Add(ctx, p, "net1", first); err != nil {
			t.Errorf("ADD on the first network, next to the refused one: %v", err)
		}
	}
	if _, err := a.Add(ctx, pods[3], "net1", separate); err != nil {
		t.Errorf("a network with its own network_name: %v", err)
	}
}

// TestPoolAdmitsOnlySelectedNamespaces: a pool with spec.namespaceSelector
// (written as an administrator would, in YAML) gives addresses to the
// selected namespaces' pods only; a NAD in another namespace naming the
// pool (anyone with NAD rights there can write one) is refused with code 7
// naming the pool and the namespace, and takes nothing.
func TestPoolAdmitsOnlySelectedNamespaces(t *testing.T) {
	ctx := context.Background()
	team, other := cp.NewNamespace(t, "team"), cp.NewNamespace(t, "other")
	name := "prod-blue-" + team[len(team)-5:]
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipkeeper.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"ranges":            []any{map[string]any{"range": "10.97.0.0/29"}},
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{corev1.LabelMetadataName: team}},
		},
	}}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	a := cp.StartAgent(t, "node-nssel")
	conf := poolConf("prod-blue-net-"+team[len(team)-5:], name)

	mine := cp.CreatePods(t, team, a.Node, "p", 1)[0]
	if _, err := a.Add(ctx, mine, "net1", conf); err != nil {
		t.Fatalf("ADD in the selected namespace %s: %v", team, err)
	}
	theirs := cp.CreatePods(t, other, a.Node, "p", 1)[0]
	_, err := a.Add(ctx, theirs, "net1", conf)
	if cniCode(err) != types.ErrInvalidNetworkConfig {
		t.Fatalf("ADD in namespace %s, which the pool does not select = %v (code %d), want code 7", other, err, cniCode(err))
	}
	mustContain(t, err, `IPPool "`+name+`"`, `namespace "`+other+`"`, "spec.namespaceSelector")
	var held []string
	for _, r := range reservationsOf(t, "prod-blue-net-"+team[len(team)-5:]) {
		held = append(held, r.Spec.Owner.Namespace)
	}
	if len(held) != 1 || held[0] != team {
		t.Errorf("reservations of the pool's network are held in namespaces %v, want only %s", held, team)
	}
}

// TestRevokedGrantKeepsWhatIsHeld: a pool whose namespaceSelector stops
// admitting a namespace refuses that namespace's new addresses, but what
// its running pods hold stays theirs, as docs/pools.md says: their CHECK
// passes and the runtime's repeated ADD gets the same address (before,
// both failed with "does not admit namespace", which could make a runtime
// tear a running pod's network down).
func TestRevokedGrantKeepsWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	team := cp.NewNamespace(t, "grant")
	name := "grant-" + team[len(team)-5:]
	pool := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipkeeperv1alpha1.IPPoolSpec{
			Ranges:            []ipkeeperv1alpha1.PoolRange{{Range: "10.97.1.0/29"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: team}},
		},
	}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	a := cp.StartAgent(t, "node-revoke")
	conf := poolConf("grant-net-"+team[len(team)-5:], name)
	pods := cp.CreatePods(t, team, a.Node, "p", 2)
	first, err := a.Add(ctx, pods[0], "net1", conf)
	if err != nil {
		t.Fatalf("ADD in the selected namespace %s: %v", team, err)
	}

	// Revoke: the selector now admits no namespace of the test.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		pool.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "nobody"}}
		return cp.Client.Update(ctx, pool)
	}); err != nil {
		t.Fatal(err)
	}
	// The new pod's ADD is refused once the agent sees the edit.
	var refused error
	if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, refused = a.Add(ctx, pods[1], "net1", conf)
		if refused == nil {
			// Admitted before the agent saw the edit: give it back and try again.
			return false, a.Del(ctx, pods[1], framework.SandboxID(pods[1]), "net1", conf)
		}
		return cniCode(refused) == types.ErrInvalidNetworkConfig, nil
	}); err != nil {
		t.Fatalf("ADD of a new pod after the grant was revoked: %v (last answer %v), want code 7", err, refused)
	}
	mustContain(t, refused, `IPPool "`+name+`"`, `namespace "`+team+`"`)

	// What the first pod holds stays its own.
	resp, err := a.Client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdCheck, ContainerID: framework.SandboxID(pods[0]), Netns: "/var/run/netns/" + pods[0].Name,
		IfName: "net1", Args: framework.PodArgs(pods[0]), Config: conf,
	})
	if err != nil {
		t.Errorf("CHECK of the running pod after the grant was revoked: %v (%v), want it to pass", err, resp)
	}
	again, err := a.Add(ctx, pods[0], "net1", conf)
	if err != nil {
		t.Fatalf("repeated ADD of the running pod after the grant was revoked: %v, want its address", err)
	}
	if got, want := again.IPs[0].Address.String(), first.IPs[0].Address.String(); got != want {
		t.Errorf("repeated ADD got %s, want the held %s", got, want)
	}
}
