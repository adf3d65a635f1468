// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// addVia runs what Add does after resolving the pod: resolve the pool and
// allocate for the pod. An inline network has its pool, as
// ipkeeper-controller makes it from the NAD before any pod attaches
// (unless it refuses to: an overlapping network).
func addVia(t *testing.T, a *Agent, conf, containerID string, podUID types2.UID) (string, error) {
	t.Helper()
	pod := testPod("pod-"+string(podUID), podUID)
	req := testRequest(t, cniproto.CmdAdd, conf, containerID, pod)
	if ps, ok := a.poolStore.(*fakePoolStore); ok {
		ps.makeInline(t, req.cfg, testNAD(req.cfg))
	}
	pool, err := a.resolvePool(context.Background(), req)
	if err != nil {
		return "", err
	}
	req.pool = pool
	ips, err := a.allocateForPod(context.Background(), req, pod)
	return formatIPs(ips), err
}

func codeIs(err error, code uint) bool {
	var ce *types.Error
	return errors.As(err, &ce) && ce.Code == code
}

func mustContainAll(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// ipkeeper-controller makes an inline network's pool from a NAD, and the
// pool is the network's one definition: an ADD through a NAD writing the
// same ranges otherwise is served from it, one through a NAD whose ranges
// differ is refused, naming both.
func TestInlineNADsMustAgreeWithTheirNetworksPool(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), newFakeClaims())
	ps := a.poolStore.(*fakePoolStore)
	first := `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.5.0.0/24","gateway":"10.5.0.1"}}`
	sameWrittenOtherwise := `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.5.0.1-10.5.0.254/24","gateway":"10.5.0.1"}}`
	otherGateway := `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.5.0.0/24","gateway":"10.5.0.254"}}`

	if _, err := addVia(t, a, first, "c1", "p1"); err != nil {
		t.Fatal(err)
	}
	made, _ := ps.Get(context.Background(), "blue")
	if _, err := addVia(t, a, sameWrittenOtherwise, "c2", "p2"); err != nil {
		t.Errorf("a NAD writing the same range differently was refused: %v", err)
	}
	_, err := addVia(t, a, otherGateway, "c3", "p3")
	if !codeIs(err, codeInvalidConfig) {
		t.Fatalf("disagreeing NAD: %v, want CNI code 7", err)
	}
	mustContainAll(t, err, `network "blue"`, `IPPool "blue"`, "gateway 10.5.0.1", "gateway 10.5.0.254")
	if now, _ := ps.Get(context.Background(), "blue"); now.Generation != made.Generation || now.Spec.Ranges[0].Gateway != "10.5.0.1" {
		t.Errorf("the pool changed under the NADs' ADDs: %+v, was %+v", now.Spec, made.Spec)
	}
}

// An inline network overlapping an older one gets no pool (the controller
// refuses to make it): its ADD is refused at once, naming the other
// network, rather than wait for a pool that never comes.
func TestOverlappingInlineNetworksAreRefused(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), newFakeClaims())
	a.opts.PoolWaitTimeout = 50 * time.Millisecond // a wait would fail with code 11
	ps := a.poolStore.(*fakePoolStore)
	netA := `{"cniVersion":"1.0.0","name":"net-a","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.0/24"}}`
	netB := `{"cniVersion":"1.0.0","name":"net-b","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.128/25"}}`
	netC := `{"cniVersion":"1.0.0","name":"net-c","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.0/24","network_name":"tenant-c"}}`
	if _, err := addVia(t, a, netA, "c1", "p1"); err != nil {
		t.Fatal(err)
	}
	_, err := addVia(t, a, netB, "c2", "p2")
	if !codeIs(err, codeInvalidConfig) {
		t.Fatalf("overlapping network: %v, want CNI code 7", err)
	}
	mustContainAll(t, err, `network "net-b"`, `"net-a"`, "network_name", "migrating-from-whereabouts")
	if n := ps.cachedCount(); n != 0 {
		t.Errorf("the overlapping network's ADD looked for its pool %d times before refusing, want none", n)
	}
	if _, err := addVia(t, a, netA, "c3", "p3"); err != nil {
		t.Errorf("the older network must keep allocating: %v", err)
	}
	if _, err := addVia(t, a, netC, "c4", "p4"); err != nil {
		t.Errorf("a network declaring its own network_name may reuse the range: %v", err)
	}
}

func TestExplicitPoolGrowsAndShrinksLive(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), newFakeClaims())
	ps := a.poolStore.(*fakePoolStore)
	conf := `{"cniVersion":"1.0.0","name":"green","type":"bridge","ipam":{"type":"ipkeeper","pool":"green-pool"}}`
	if _, err := addVia(t, a, conf, "c0", "p0"); !codeIs(err, codeInvalidConfig) || !strings.Contains(err.Error(), `IPPool "green-pool" does not exist`) {
		t.Fatalf("missing pool: %v, want code 7 naming it", err)
	}
	ps.put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "green-pool"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.7.0.0/30"}}}}) // 2 usable
	for i, p := range []types2.UID{"p1", "p2"} {
		if _, err := addVia(t, a, conf, "c-"+string(p), p); err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
	}
	if _, err := addVia(t, a, conf, "c3", "p3"); reasonOf(err) != reasonExhausted {
		t.Fatalf("third ADD on 2 addresses: %v, want exhausted", err)
	}
	// Grow: a second IPv4 range is used at once.
	ps.put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "green-pool"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.7.0.0/30"}, {Range: "10.7.1.0/30"}}}})
	got, err := addVia(t, a, conf, "c3", "p3")
	if err != nil || !strings.HasPrefix(got, "10.7.1.") {
		t.Fatalf("ADD after growth = %q, %v; want an address of the new range", got, err)
	}
	// Shrink: remove the first range. p1 keeps its address on a re-ADD,
	// and nobody new gets one there.
	held, _ := addVia(t, a, conf, "c-p1", "p1")
	ps.put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "green-pool"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.7.1.0/30"}}}})
	again, err := addVia(t, a, conf, "c-p1", "p1")
	if err != nil || again != held {
		t.Errorf("re-ADD after the range was removed = %q, %v; want the held %q", again, err, held)
	}
	got, err = addVia(t, a, conf, "c4", "p4")
	if err != nil || !strings.HasPrefix(got, "10.7.1.") {
		t.Errorf("ADD after shrink = %q, %v; want the remaining range", got, err)
	}
	// An invalid spec is a configuration error naming the field.
	ps.put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "green-pool"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.7.1.0/33"}}}})
	_, err = addVia(t, a, conf, "c5", "p5")
	if !codeIs(err, codeInvalidConfig) {
		t.Fatalf("invalid pool: %v, want code 7", err)
	}
	mustContainAll(t, err, `IPPool "green-pool"`, "spec.ranges[0].range", "10.7.1.0/33")
}

// A released reservation waiting out its pool's cooldown keeps the address
// from everyone, its former owner included.
func TestReleasedReservationIsNobodys(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	conf := `{"cniVersion":"1.0.0","name":"tiny","type":"bridge","ipam":{"type":"ipkeeper","range":"10.8.0.0/30"}}`
	first, err := addVia(t, a, conf, "c1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	r := store.all()[0]
	r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour)}
	if err := store.Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	a.recordLive(r)
	again, err := addVia(t, a, conf, "c2", "p1")
	if err != nil || again == first {
		t.Fatalf("the former owner's next ADD = %q, %v; want the other address, not the released %s", again, err, first)
	}
	if _, err := addVia(t, a, conf, "c3", "p3"); reasonOf(err) != reasonExhausted {
		t.Errorf("ADD with one address held and one cooling down: %v, want exhausted", err)
	}
}

func TestPoolReservationNames(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.poolStore.(*fakePoolStore).put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.10.0.0/30"}}}})
	// Two networks on one pool: one address each, then the pool is full.
	x := `{"cniVersion":"1.0.0","name":"x","type":"bridge","ipam":{"type":"ipkeeper","pool":"shared"}}`
	y := `{"cniVersion":"1.0.0","name":"y","type":"bridge","ipam":{"type":"ipkeeper","pool":"shared"}}`
	ipX, err := addVia(t, a, x, "c1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	ipY, err := addVia(t, a, y, "c2", "p2")
	if err != nil || ipY == ipX {
		t.Fatalf("second network on the pool = %q, %v; want the other address than %s", ipY, err, ipX)
	}
	if _, err := addVia(t, a, x, "c3", "p3"); reasonOf(err) != reasonExhausted {
		t.Errorf("third ADD across two networks of a 2-address pool: %v, want exhausted", err)
	}
	for _, r := range store.all() {
		if r.Spec.Pool != "shared" || r.Name != naming.Reservation("shared", netip.MustParseAddr(r.Spec.IP)) {
			t.Errorf("reservation %s: pool %q; want pool shared and a name from (pool, ip)", r.Name, r.Spec.Pool)
		}
	}
}

// The runtime's CNI GC lists the valid attachments of one network: another
// network drawing from the same pool is not its to judge.
func TestCNIGCOfOneNetworkSparesTheOtherNetworksOfItsPool(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.opts.CNIGCMinAge = -1
	a.poolStore.(*fakePoolStore).put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.11.0.0/29"}}}})
	x := `{"cniVersion":"1.1.0","name":"x","type":"bridge","ipam":{"type":"ipkeeper","pool":"shared"}}`
	y := `{"cniVersion":"1.1.0","name":"y","type":"bridge","ipam":{"type":"ipkeeper","pool":"shared"}}`
	if _, err := addVia(t, a, x, "cx", "px"); err != nil {
		t.Fatal(err)
	}
	if _, err := addVia(t, a, y, "cy", "py"); err != nil {
		t.Fatal(err)
	}
	gc := `{"cniVersion":"1.1.0","name":"x","type":"bridge","ipam":{"type":"ipkeeper","pool":"shared"},"cni.dev/valid-attachments":[]}`
	if err := a.GC(context.Background(), &cniproto.Request{Command: cniproto.CmdGC, Config: []byte(gc)}); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range store.all() {
		left = append(left, r.Spec.Network)
	}
	if len(left) != 1 || left[0] != "y" {
		t.Fatalf("after a GC of network x with no valid attachment, reservations of networks %v are left; want only y's", left)
	}
}

// A network whose name is not a valid object name gets a hashed pool name;
// its reservations are named from the network (the pool's lock key), so a
// reservation another writer made under that name is the same lock.
func TestHashedInlinePoolLocksByNetworkName(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	legacy := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("My_Net", netip.MustParseAddr("10.12.0.3"))},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Network: "My_Net", Pool: naming.InlinePool("My_Net"), IP: "10.12.0.3", InterfaceName: "net1", Node: "node-a",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "old", UID: "old-uid"}},
	}
	if err := store.Create(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	static := `{"cniVersion":"1.0.0","name":"My_Net","type":"bridge","runtimeConfig":{"ips":["10.12.0.3"]},"ipam":{"type":"ipkeeper","range":"10.12.0.0/24"}}`
	got, err := addVia(t, a, static, "c1", "p1")
	if err == nil || reasonOf(err) != reasonConflict {
		t.Fatalf("static ADD of an address held under the network's lock = %q, %v; want a conflict", got, err)
	}
	if n := len(store.all()); n != 1 {
		t.Errorf("%d reservations, want only the old one", n)
	}
}

// A reservation released after the index was read is not taken over: it
// cools down for nobody, its former holder included.
func TestTakeOverRefusesAReservationReleasedMeanwhile(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	conf := `{"cniVersion":"1.0.0","name":"tk","type":"bridge","ipam":{"type":"ipkeeper","range":"10.13.0.0/29"}}`
	first, err := addVia(t, a, conf, "c1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	r := store.all()[0]
	r.Spec.Node = "node-b" // the pod moved: its next ADD takes the reservation over
	if err := store.Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	a.recordLive(r)
	r = store.all()[0]
	r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour)}
	if err := store.Update(context.Background(), r); err != nil { // released; the index does not know yet
		t.Fatal(err)
	}
	if got, err := addVia(t, a, conf, "c2", "p1"); err == nil {
		t.Fatalf("ADD took over a released reservation and returned %s", got)
	}
	again, err := addVia(t, a, conf, "c2", "p1")
	if err != nil || again == first {
		t.Fatalf("the retried ADD = %q, %v; want a new address, not the released %s", again, err, first)
	}
}

// An older inline network's pool grown (by an admin) into a younger inline
// network's range does not hand out the younger one's addresses.
func TestOlderInlinePoolGrownIntoAYoungerOneSkipsItsRange(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), newFakeClaims())
	ps := a.poolStore.(*fakePoolStore)
	older := `{"cniVersion":"1.0.0","name":"older","type":"bridge","ipam":{"type":"ipkeeper","range":"10.14.0.0/29"}}`
	younger := `{"cniVersion":"1.0.0","name":"younger","type":"bridge","ipam":{"type":"ipkeeper","range":"10.14.0.8/29"}}`
	if _, err := addVia(t, a, older, "c0", "p0"); err != nil {
		t.Fatal(err)
	}
	held, err := addVia(t, a, younger, "cy", "py")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ps.Get(context.Background(), "older")
	p.Spec.Ranges = []ipkeeperv1alpha1.PoolRange{{Range: "10.14.0.0/28"}}
	ps.put(p)
	for i := 1; ; i++ {
		got, err := addVia(t, a, older, fmt.Sprintf("c%d", i), types2.UID(fmt.Sprintf("p%d", i)))
		if err != nil {
			if reasonOf(err) != reasonExhausted {
				t.Fatalf("ADD %d: %v, want an address or exhausted", i, err)
			}
			break
		}
		// The younger network hands out .9-.14 (.8 and .15 are its
		// network and broadcast addresses).
		if ip := netip.MustParsePrefix(got).Addr(); !ip.Less(netip.MustParseAddr("10.14.0.9")) && !netip.MustParseAddr("10.14.0.14").Less(ip) {
			t.Fatalf("the grown older network handed out %s, in the younger network's range (which holds %s)", got, held)
		}
		if i > 20 {
			t.Fatal("no exhaustion after 20 ADDs")
		}
	}
}

// A static address still cooling down after its release is a passing
// state: "try again later", saying until when, not "reserved by" the pod
// that let it go.
func TestStaticAddressCoolingDownIsTryAgainLater(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), newFakeClaims())
	a.poolStore.(*fakePoolStore).put(coolPool(time.Hour, "10.15.0.0/29"))
	static := `{"cniVersion":"1.0.0","name":"coolnet","type":"bridge","runtimeConfig":{"ips":["10.15.0.5"]},"ipam":{"type":"ipkeeper","pool":"cool"}}`
	if _, err := addVia(t, a, static, "c1", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := delVia(t, a, static, "c1"); err != nil {
		t.Fatal(err)
	}
	_, err := addVia(t, a, static, "c2", "p2")
	if !codeIs(err, codeTryAgainLater) {
		t.Fatalf("static ADD of a cooling address: %v, want code 11", err)
	}
	mustContainAll(t, err, "10.15.0.5", "cools down until", `IPPool "cool"`)
}

// resolveVia runs resolvePool for req's ADD: with nad, through the
// network's NAD (as resolvePod records an attachment that names one),
// else as one through args.cni.
func resolveVia(a *Agent, req *request, nad bool) error {
	if nad {
		key := testNAD(req.cfg)
		req.attach.nad = &key
	}
	_, err := a.resolvePool(context.Background(), req)
	return err
}

// An inline network's pool is made by ipkeeper-controller from its NAD;
// an ADD that comes first waits for it (reading the agent's cache) and is
// served once it is there.
func TestAddWaitsForItsInlinePool(t *testing.T) {
	a := newTestAgent(t, newFakeStore(), newFakeClaims())
	a.opts.PoolWaitTimeout = time.Hour // the test ends the wait
	ps := a.poolStore.(*fakePoolStore)
	conf := `{"cniVersion":"1.0.0","name":"late","type":"bridge","ipam":{"type":"ipkeeper","range":"10.16.0.0/29"}}`
	pod := testPod("pod-late", "pod-late")
	req := testRequest(t, cniproto.CmdAdd, conf, "c1", pod)
	type result struct {
		ips string
		err error
	}
	done := make(chan result, 1)
	go func() {
		pool, err := a.resolvePool(context.Background(), req)
		if err != nil {
			done <- result{"", err}
			return
		}
		req.pool = pool
		ips, err := a.allocateForPod(context.Background(), req, pod)
		done <- result{formatIPs(ips), err}
	}()
	select {
	case <-ps.missed:
	case r := <-done:
		t.Fatalf("ADD returned (%q, %v) before its network had a pool", r.ips, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("ADD did not look for its pool in the cache within 10s")
	}
	if !ps.makeInline(t, mustParse(t, conf), testNAD(mustParse(t, conf))) {
		t.Fatal("the controller made no pool")
	}
	select {
	case r := <-done:
		if r.err != nil || !strings.HasPrefix(r.ips, "10.16.0.") {
			t.Fatalf("ADD once the pool exists = %q, %v; want an address of 10.16.0.0/29", r.ips, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ADD did not return within 10s of its pool being made")
	}
}

// An inline network whose pool is not made within PoolWaitTimeout fails
// the ADD with "try again later", naming the network, its pool and where
// the controller makes it from: the NAD, when the attachment came through
// one.
func TestAddGivesUpOnAMissingInlinePool(t *testing.T) {
	conf := `{"cniVersion":"1.0.0","name":"late","type":"bridge","ipam":{"type":"ipkeeper","range":"10.16.0.0/29"}}`
	for _, tt := range []struct {
		name  string
		nad   bool
		where string
	}{
		{"through a NAD", true, "NAD vms/nad-late"},
		{"through args.cni", false, "this network's configuration"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAgent(t, newFakeStore(), newFakeClaims())
			a.opts.PoolWaitTimeout = 50 * time.Millisecond
			req := testRequest(t, cniproto.CmdAdd, conf, "c1", testPod("pod-late", "pod-late"))
			err := resolveVia(a, req, tt.nad)
			if !codeIs(err, codeTryAgainLater) {
				t.Fatalf("ADD without a pool = %v, want CNI code 11", err)
			}
			mustContainAll(t, err, `network "late"`, `IPPool "late"`, "50ms", tt.where)
			if n := a.poolStore.(*fakePoolStore).cachedCount(); n == 0 {
				t.Errorf("the ADD gave up without looking for the pool in the cache")
			}
		})
	}
}

// ipkeeper-controller makes no pool for an inline network overlapping an
// older inline network with the same ipam.network_name: the ADD is refused
// at once (CNI code 7, no wait), naming the other network's pool. Networks
// that declare different network_name values, and named pools, may
// overlap: such an ADD waits for its pool like any other.
func TestAddRefusesAnInlineNetworkOverlappingAnotherAtOnce(t *testing.T) {
	const (
		blueRange = `"range":"10.17.0.0/24"`
		lateRange = `"range":"10.17.0.128/25"`
	)
	inline := func(name, networkName, rng string) string {
		nn := ""
		if networkName != "" {
			nn = `,"network_name":"` + networkName + `"`
		}
		return `{"cniVersion":"1.0.0","name":"` + name + `","type":"bridge","ipam":{"type":"ipkeeper",` + rng + nn + `}}`
	}
	for _, tt := range []struct {
		name          string
		other         func(t *testing.T, ps *fakePoolStore)
		networkName   string
		refused       bool
		wantInRefusal []string
	}{
		{
			name: "an inline network's pool, no network_name on either",
			other: func(t *testing.T, ps *fakePoolStore) {
				cfg := mustParse(t, inline("blue", "", blueRange))
				ps.makeInline(t, cfg, testNAD(cfg))
			},
			refused: true, wantInRefusal: []string{`network "late"`, "10.17.0.128/25", "10.17.0.0/24", `IPPool "blue"`},
		},
		{
			name: "an inline network's pool, the same network_name",
			other: func(t *testing.T, ps *fakePoolStore) {
				cfg := mustParse(t, inline("blue", "tenant-x", blueRange))
				ps.makeInline(t, cfg, testNAD(cfg))
			},
			networkName: "tenant-x",
			refused:     true, wantInRefusal: []string{`network "late"`, `IPPool "blue"`},
		},
		{
			name: "an inline network's pool, another network_name",
			other: func(t *testing.T, ps *fakePoolStore) {
				cfg := mustParse(t, inline("blue", "tenant-x", blueRange))
				ps.makeInline(t, cfg, testNAD(cfg))
			},
		},
		{
			name: "a named pool",
			other: func(_ *testing.T, ps *fakePoolStore) {
				ps.put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "shared"},
					Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.17.0.0/24"}}}})
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAgent(t, newFakeStore(), newFakeClaims())
			a.opts.PoolWaitTimeout = 50 * time.Millisecond
			ps := a.poolStore.(*fakePoolStore)
			tt.other(t, ps)
			req := testRequest(t, cniproto.CmdAdd, inline("late", tt.networkName, lateRange), "c1", testPod("pod-late", "pod-late"))
			err := resolveVia(a, req, true)
			if !tt.refused {
				if !codeIs(err, codeTryAgainLater) || ps.cachedCount() == 0 {
					t.Fatalf("ADD = %v after %d looks for its pool; want it to wait for the pool, then CNI code 11", err, ps.cachedCount())
				}
				return
			}
			if !codeIs(err, codeInvalidConfig) {
				t.Fatalf("ADD of an overlapping network = %v, want CNI code 7", err)
			}
			mustContainAll(t, err, append(tt.wantInRefusal, "NAD vms/nad-late")...)
			if n := ps.cachedCount(); n != 0 {
				t.Errorf("the refused ADD looked for its pool %d times first, want it refused at once", n)
			}
		})
	}
}
