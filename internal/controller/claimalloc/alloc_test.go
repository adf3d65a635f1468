// SPDX-License-Identifier: Apache-2.0

package claimalloc_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// span is a range of subnet 10.0.0.0/24, whose blocks are /30s (four
// addresses): span("10.0.0.4", "10.0.0.11") is exactly two blocks.
func span(start, end string) v1alpha1.PoolRange {
	return v1alpha1.PoolRange{Range: "10.0.0.0/24", RangeStart: start, RangeEnd: end}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// heldRes is a reservation of ip in pool, as the controller's cache of
// reservations would hold it.
func heldRes(pool, ip string) *v1alpha1.IPReservation {
	return &v1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(pool, addr(ip))},
		Spec:       v1alpha1.IPReservationSpec{Pool: pool, Network: "blue", IP: ip},
	}
}

// nodeBlock is block cidr of pool, held by node's agent.
func nodeBlock(pool, cidr, node string) *v1alpha1.IPBlock {
	p := netip.MustParsePrefix(cidr)
	return &v1alpha1.IPBlock{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Block(pool, p), Labels: map[string]string{naming.PoolLabel: naming.PoolLabelValue(pool)}},
		Spec:       v1alpha1.IPBlockSpec{Pool: pool, CIDR: cidr, Holder: v1alpha1.HolderNode, Node: node},
	}
}

func (e *env) assign(t *testing.T, h claimalloc.Holder, seed string) (*v1alpha1.IPReservation, error) {
	t.Helper()
	return e.alloc.Assign(context.Background(), e.pool, h, e.pool.Families()[0], seed)
}

func ipOf(t *testing.T, res *v1alpha1.IPReservation) netip.Addr {
	t.Helper()
	ip, err := netip.ParseAddr(res.Spec.IP)
	if err != nil {
		t.Fatalf("reservation %s: %v", res.Name, err)
	}
	return ip
}

// An assigned address comes from a block the controller takes for
// IPAMClaims: an IPBlock owned by the pool (so it goes with it), labelled
// with it, named from the pool's lock key; the reservation is labelled as
// in a claims' block so that no agent watches it.
func TestAssignTakesABlockOfIPAMClaims(t *testing.T) {
	inline := ippool("net-blue.0123456789abcdef", span("10.0.0.4", "10.0.0.251"))
	inline.Annotations = map[string]string{v1alpha1.InlineNetworkAnnotation: "Blue_Net"}
	for _, tt := range []struct {
		name string
		pool *v1alpha1.IPPool
		key  string
	}{
		{name: "pool named after itself", pool: ippool("shared", span("10.0.0.4", "10.0.0.251")), key: "shared"},
		{name: "inline pool of a hashed network name", pool: inline, key: "Blue_Net"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.pool)
			h := claimHolder("ns", "vm1.blue")
			res, err := e.assign(t, h, "seed")
			if err != nil {
				t.Fatal(err)
			}
			ip := ipOf(t, res)
			if res.Name != naming.Reservation(tt.key, ip) {
				t.Errorf("reservation name %s, want %s (from the lock key %q)", res.Name, naming.Reservation(tt.key, ip), tt.key)
			}
			if res.Spec.Pool != tt.pool.Name || res.Spec.Network != "blue" || res.Spec.Owner != h.Owner || res.Spec.InterfaceName != h.Interface {
				t.Errorf("spec = %+v, want pool %s, network blue, the holder's owner and interface", res.Spec, tt.pool.Name)
			}
			for k, v := range naming.ReservationLabels("blue", string(v1alpha1.OwnerIPAMClaim)) {
				if res.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, res.Labels[k], v)
				}
			}
			if res.Labels[naming.ClaimsBlockLabel] != "true" {
				t.Errorf("labels %v lack %s=true", res.Labels, naming.ClaimsBlockLabel)
			}
			var stored v1alpha1.IPReservation
			if err := e.c.Get(context.Background(), client.ObjectKey{Name: res.Name}, &stored); err != nil {
				t.Fatalf("the reservation was not created: %v", err)
			}
			bs := e.blocks(t)
			if len(bs) != 1 {
				t.Fatalf("%d blocks, want 1: %+v", len(bs), bs)
			}
			b := bs[0]
			want := e.pool.Ranges[0].BlockOf(ip)
			if b.Spec.CIDR != want.String() || b.Spec.Holder != v1alpha1.HolderIPAMClaims || b.Spec.Node != "" || b.Spec.Pool != tt.pool.Name {
				t.Errorf("block spec = %+v, want %s of pool %s, holder IPAMClaims, no node", b.Spec, want, tt.pool.Name)
			}
			if b.Name != naming.Block(tt.key, want) {
				t.Errorf("block name %s, want %s", b.Name, naming.Block(tt.key, want))
			}
			if b.Labels[naming.PoolLabel] != naming.PoolLabelValue(tt.pool.Name) {
				t.Errorf("block labels %v, want %s=%s", b.Labels, naming.PoolLabel, naming.PoolLabelValue(tt.pool.Name))
			}
			if len(b.OwnerReferences) != 1 || b.OwnerReferences[0].Kind != "IPPool" || b.OwnerReferences[0].UID != tt.pool.UID {
				t.Errorf("block owners %+v, want the IPPool (uid %s)", b.OwnerReferences, tt.pool.UID)
			}
			if !e.set.Owns(tt.pool.Name, ip) {
				t.Errorf("the claims' Set does not know of its new block %s", want)
			}
		})
	}
}

// Claims share blocks: a new block is taken only when the claims' blocks
// are full.
func TestAssignFillsABlockThenTakesAnother(t *testing.T) {
	e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.251")))
	perBlock := map[string]int{}
	for i := range 8 {
		res, err := e.assign(t, claimHolder("ns", fmt.Sprintf("vm%d.blue", i)), fmt.Sprintf("uid-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if res.Labels[naming.ClaimsBlockLabel] != "true" {
			t.Errorf("assignment %d (%s) is not in a claims' block", i, res.Spec.IP)
		}
		perBlock[e.pool.Ranges[0].BlockOf(ipOf(t, res)).String()]++
		if got, want := len(e.blocks(t)), i/4+1; got != want {
			t.Fatalf("after %d assignments: %d blocks, want %d", i+1, got, want)
		}
	}
	for _, b := range e.blocks(t) {
		if perBlock[b.Spec.CIDR] != 4 {
			t.Errorf("block %s handed out %d addresses, want all 4", b.Spec.CIDR, perBlock[b.Spec.CIDR])
		}
	}
}

// What the cache shows held (released ones included) and the ranges of
// younger overlapping networks are never handed out; past them the range
// is exhausted.
func TestAssignSkipsHeldAndBlockedAddresses(t *testing.T) {
	e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.11")))
	cooling := heldRes("p", "10.0.0.6")
	cooling.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour)}
	for _, r := range []*v1alpha1.IPReservation{heldRes("p", "10.0.0.5"), cooling, heldRes("p", "10.0.0.9")} {
		e.addrs.Set(r) // the cache only: a create of theirs would succeed
	}
	e.pool.Overlapped = []iprange.Range{iprange.MustNew(iprange.Spec{
		Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: addr("10.0.0.10"), End: addr("10.0.0.11"),
	})}
	var got []string
	for i := range 10 {
		res, err := e.assign(t, claimHolder("ns", fmt.Sprintf("vm%d.blue", i)), fmt.Sprintf("uid-%d", i))
		if errors.Is(err, ipam.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Spec.IP)
	}
	slices.Sort(got)
	if want := []string{"10.0.0.4", "10.0.0.7", "10.0.0.8"}; !slices.Equal(got, want) {
		t.Errorf("assigned %v before exhaustion, want %v", got, want)
	}
}

// When nodes hold every block of the range, an address is borrowed,
// labelled shared so the agent of its block's node sees it; a block nobody
// holds is taken first.
func TestAssignBorrowsWhenNodesHoldEveryBlock(t *testing.T) {
	for _, tt := range []struct {
		name       string
		nodeBlocks []string
		wantBlock  string // the claims' block taken; "" when borrowing
	}{
		{name: "one block free", nodeBlocks: []string{"10.0.0.4/30"}, wantBlock: "10.0.0.8/30"},
		{name: "every block held", nodeBlocks: []string{"10.0.0.4/30", "10.0.0.8/30"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var objs []client.Object
			for _, b := range tt.nodeBlocks {
				objs = append(objs, nodeBlock("p", b, "node-1"))
			}
			e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.11")), objs...)
			// Twice: the second look may come from the memory that no
			// block was free.
			for i := range 2 {
				res, err := e.assign(t, claimHolder("ns", fmt.Sprintf("vm%d.blue", i)), fmt.Sprintf("uid-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				ip, labelled := ipOf(t, res), res.Labels[naming.ClaimsBlockLabel] == "true"
				if tt.wantBlock == "" {
					if labelled || res.Labels[naming.NodeLabel] != naming.SharedNodeLabelValue {
						t.Errorf("borrowed %s labelled %v, want %s=%s and not %s: the node's agent would not see it", ip, res.Labels,
							naming.NodeLabel, naming.SharedNodeLabelValue, naming.ClaimsBlockLabel)
					}
					if res.Labels[naming.NetworkLabel] != "blue" {
						t.Errorf("borrowed reservation labels %v lack the network", res.Labels)
					}
					continue
				}
				if !labelled || !netip.MustParsePrefix(tt.wantBlock).Contains(ip) {
					t.Errorf("assigned %s (claims' block label %v), want one in the free block %s", ip, labelled, tt.wantBlock)
				}
			}
			var claims []string
			for _, b := range e.blocks(t) {
				if b.Spec.Holder == v1alpha1.HolderIPAMClaims {
					claims = append(claims, b.Spec.CIDR)
				}
			}
			if want := []string{tt.wantBlock}; tt.wantBlock == "" && len(claims) > 0 || tt.wantBlock != "" && !slices.Equal(claims, want) {
				t.Errorf("claims' blocks %v, want %q", claims, tt.wantBlock)
			}
		})
	}
}

// The allocator counts its own creates as held only until the cache
// shows them: an address the cache showed and then saw go is free at once,
// not after the allocator's memory of its creates expires.
func TestReleasedCreateIsFreeOnceTheCacheSawIt(t *testing.T) {
	e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.7")))
	first, err := e.assign(t, claimHolder("ns", "vm1.blue"), "seed")
	if err != nil {
		t.Fatal(err)
	}
	e.addrs.Set(first) // the watch delivers it
	if err := e.c.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	// The watch delivers its deletion; the same seed aims at the same
	// first candidate.
	e.addrs.Delete(first.Name)
	again, err := e.assign(t, claimHolder("ns", "vm2.blue"), "seed")
	if err != nil {
		t.Fatal(err)
	}
	if again.Spec.IP != first.Spec.IP {
		t.Errorf("assigned %s, want %s: freed, and no longer the allocator's own create", again.Spec.IP, first.Spec.IP)
	}
}

// A family's next range is used when its first is full.
func TestAssignMovesToTheFamilysNextRange(t *testing.T) {
	e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.5"), v1alpha1.PoolRange{Range: "10.0.1.0/24"}))
	e.addrs.Set(heldRes("p", "10.0.0.4"))
	e.addrs.Set(heldRes("p", "10.0.0.5"))
	res, err := e.assign(t, claimHolder("ns", "vm1.blue"), "uid")
	if err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix("10.0.1.0/24").Contains(ipOf(t, res)) {
		t.Errorf("assigned %s, want one of the second range", res.Spec.IP)
	}
}

// Reserve makes an exact address the holder's, or says whose it is in
// words fit for the holder's namespace.
func TestReserve(t *testing.T) {
	const pool = "p"
	reuseAt := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	h := claimHolder("ns", "vm1.blue")
	existing := func(ip string, owner v1alpha1.ReservationOwner, released bool) *v1alpha1.IPReservation {
		r := heldRes(pool, ip)
		r.Spec.Owner = owner
		if released {
			r.Spec.ReuseAfter = &metav1.Time{Time: reuseAt}
		}
		return r
	}
	pod := v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerPod, Namespace: "ns", Name: "web-1", UID: "pod-uid"}
	otherNS := v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerPod, Namespace: "secret-team", Name: "db-0", UID: "pod-uid-2"}
	recreated := h.Owner
	recreated.UID = "uid-of-an-earlier-claim-of-that-name"
	for _, tt := range []struct {
		name     string
		ip       string
		existing *v1alpha1.IPReservation
		inBlock  bool   // the address lies in a block of IPAMClaims
		taken    string // part of the holder's description; "" when reserved
		not      []string
	}{
		{name: "free, outside the claims' blocks", ip: "10.0.0.20"},
		{name: "free, in a claims' block", ip: "10.0.0.5", inBlock: true},
		{name: "the holder's already (a lost answer)", ip: "10.0.0.20", existing: existing("10.0.0.20", h.Owner, false)},
		{name: "a pod's in the namespace", ip: "10.0.0.20", existing: existing("10.0.0.20", pod, false), taken: "is already reserved by Pod ns/web-1 (reservation "},
		{name: "another namespace's", ip: "10.0.0.20", existing: existing("10.0.0.20", otherNS, false),
			taken: "is already reserved by a workload in another namespace", not: []string{"secret-team", "db-0"}},
		{name: "an earlier claim of the same name", ip: "10.0.0.20", existing: existing("10.0.0.20", recreated, false), taken: "is already reserved by IPAMClaim ns/vm1.blue (reservation "},
		{name: "released, cooling down", ip: "10.0.0.20", existing: existing("10.0.0.20", otherNS, true),
			taken: "was released by its previous holder and cools down until 2026-01-01T00:01:00Z", not: []string{"secret-team"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var objs []client.Object
			if tt.existing != nil {
				objs = append(objs, tt.existing)
			}
			e := newEnv(t, ippool(pool, span("10.0.0.4", "10.0.0.251")), objs...)
			if tt.inBlock {
				e.set.Record(&v1alpha1.IPBlock{Spec: v1alpha1.IPBlockSpec{Pool: pool, CIDR: "10.0.0.4/30", Holder: v1alpha1.HolderIPAMClaims}})
			}
			res, err := e.alloc.Reserve(context.Background(), e.pool, h, addr(tt.ip))
			var te *reservation.TakenError
			if tt.taken != "" {
				if !errors.As(err, &te) {
					t.Fatalf("Reserve = %v, %v; want a TakenError", res, err)
				}
				if te.Holder == nil || te.Holder.Name != tt.existing.Name {
					t.Errorf("TakenError names reservation %+v, want %s", te.Holder, tt.existing.Name)
				}
				msg := reservation.DescribeHolder(te.Name, te.Holder, h.Owner.Namespace)
				if !strings.Contains(msg, tt.taken) {
					t.Errorf("description %q lacks %q", msg, tt.taken)
				}
				for _, n := range tt.not {
					if strings.Contains(msg, n) {
						t.Errorf("description %q names %q, another namespace's", msg, n)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Spec.IP != tt.ip || res.Spec.Owner != h.Owner || res.Name != naming.Reservation(pool, addr(tt.ip)) {
				t.Errorf("Reserve = %+v, want the holder's reservation of %s", res, tt.ip)
			}
			if tt.existing == nil && (res.Labels[naming.ClaimsBlockLabel] == "true") != tt.inBlock {
				t.Errorf("labels %v: in a claims' block %v", res.Labels, tt.inBlock)
			}
		})
	}
}

// An address that is not one an IPReservation may hold is refused before
// any write, as an error that is not a TakenError.
func TestReserveRefusesAnInvalidAddress(t *testing.T) {
	e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.251")))
	_, err := e.alloc.Reserve(context.Background(), e.pool, claimHolder("ns", "vm1.blue"), netip.MustParseAddr("::ffff:10.0.0.5"))
	var te *reservation.TakenError
	if err == nil || errors.As(err, &te) || !strings.Contains(err.Error(), "IPv4-mapped") {
		t.Errorf("Reserve(::ffff:10.0.0.5) = %v, want an error naming the mapped address", err)
	}
	if n := len(e.reservations(t)); n != 0 {
		t.Errorf("%d reservations created", n)
	}
}

// The controller's workers assign at once: no address twice, and no
// failure while the range has room. Seeds repeat on purpose, so that
// workers aim at the same first candidates.
func TestConcurrentAssignsNeverShareAnAddress(t *testing.T) {
	e := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.251")))
	const workers, each = 16, 8
	var (
		mu  sync.Mutex
		got = map[string]string{}
		wg  sync.WaitGroup
	)
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("vm%d-%d.blue", w, i)
				res, err := e.alloc.Assign(context.Background(), e.pool, claimHolder("ns", name), e.pool.Families()[0], fmt.Sprint(i%3))
				if err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					continue
				}
				mu.Lock()
				if prev, dup := got[res.Spec.IP]; dup {
					errs <- fmt.Errorf("%s assigned to %s and %s", res.Spec.IP, prev, name)
				}
				got[res.Spec.IP] = name
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(got) != workers*each || len(e.reservations(t)) != workers*each {
		t.Errorf("%d distinct addresses, %d reservations; want %d", len(got), len(e.reservations(t)), workers*each)
	}
	// Workers that all find the blocks full take one block between them,
	// not one each: the blocks are filled.
	if n := len(e.blocks(t)); n != workers*each/4 {
		t.Errorf("%d blocks of 4 for %d addresses", n, workers*each)
	}
	for _, r := range e.reservations(t) {
		if r.Labels[naming.ClaimsBlockLabel] != "true" {
			t.Errorf("%s borrowed while blocks were free", r.Spec.IP)
		}
	}
}

// Two allocators whose caches do not show each other's creates (a new
// leader, say) still never hand out one address twice: the reservation's
// name is the lock.
func TestStaleCachesNeverShareAnAddress(t *testing.T) {
	a := newEnv(t, ippool("p", span("10.0.0.4", "10.0.0.19")))
	b := newEnvOn(t, a.c, a.obj)
	seen := map[string]string{}
	for i := range 6 {
		for _, x := range []struct {
			name string
			e    *env
		}{{"a", a}, {"b", b}} {
			claim := fmt.Sprintf("%s%d.blue", x.name, i)
			res, err := x.e.assign(t, claimHolder("ns", claim), fmt.Sprint(i)) // the same seed for both
			if err != nil {
				t.Fatalf("%s: %v", claim, err)
			}
			if prev, dup := seen[res.Spec.IP]; dup {
				t.Fatalf("%s assigned to %s and %s", res.Spec.IP, prev, claim)
			}
			seen[res.Spec.IP] = claim
		}
	}
}

// The allocator is ready only when it has seen every reservation and
// every block: before, it would pick addresses it cannot see are held.
func TestReady(t *testing.T) {
	for _, tt := range []struct {
		addrsSynced, blocksSynced, want bool
	}{
		{false, false, false},
		{true, false, false},
		{false, true, false},
		{true, true, true},
	} {
		addrs := reservationindex.NewAddresses()
		if tt.addrsSynced {
			syncAddresses(t, addrs)
		}
		a := claimalloc.New(nil, nil, addrs, blocks.NewSet(string(v1alpha1.HolderIPAMClaims)), func() bool { return tt.blocksSynced }, logr.Discard())
		if got := a.Ready(); got != tt.want {
			t.Errorf("addresses synced %v, blocks synced %v: Ready = %v, want %v", tt.addrsSynced, tt.blocksSynced, got, tt.want)
		}
	}
}

// WatchBlocks keeps the Set of IPAMClaims' blocks from the IPBlock
// informer (every holder's blocks: those of nodes are held, not the
// claims'), and reports the informer's sync.
func TestWatchBlocks(t *testing.T) {
	infs := &fakeInformers{}
	set := blocks.NewSet(string(v1alpha1.HolderIPAMClaims))
	synced, err := claimalloc.WatchBlocks(t.Context(), infs, set)
	if err != nil {
		t.Fatal(err)
	}
	inf := infs.of(&v1alpha1.IPBlock{})
	if synced() {
		t.Error("synced before the informer is")
	}
	inf.synced.Store(true)
	if !synced() {
		t.Error("not synced once the informer is")
	}
	mine := &v1alpha1.IPBlock{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: v1alpha1.IPBlockSpec{Pool: "p", CIDR: "10.0.0.4/30", Holder: v1alpha1.HolderIPAMClaims}}
	node := nodeBlock("p", "10.0.0.8/30", "node-1")
	inf.add(mine)
	inf.add(node)
	if got := set.Own("p"); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.4/30")}) {
		t.Errorf("own blocks %v, want [10.0.0.4/30]", got)
	}
	if set.Free("p", netip.MustParsePrefix("10.0.0.8/30")) {
		t.Error("a node's block counts as free")
	}
	// IPBlocks are immutable: an update changes metadata only.
	relabelled := mine.DeepCopy()
	relabelled.Labels = map[string]string{"x": "y"}
	inf.update(mine, relabelled)
	if !set.Owns("p", addr("10.0.0.5")) {
		t.Error("an updated block is forgotten")
	}
	inf.remove(relabelled)
	inf.remove(toolscache.DeletedFinalStateUnknown{Key: node.Name, Obj: node})
	if set.Owns("p", addr("10.0.0.5")) || !set.Free("p", netip.MustParsePrefix("10.0.0.8/30")) {
		t.Errorf("deleted blocks are still held: own %v", set.Own("p"))
	}
}

// A pool's ranges are grouped by family in order of first appearance.
func TestFamilies(t *testing.T) {
	p, err := ipam.PoolOf(ippool("p",
		v1alpha1.PoolRange{Range: "fd00::/64"}, v1alpha1.PoolRange{Range: "10.0.0.0/24"}, v1alpha1.PoolRange{Range: "fd01::/64"}, v1alpha1.PoolRange{Range: "10.0.1.0/24"}))
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, f := range p.Families() {
		var subnets []string
		for _, r := range f {
			subnets = append(subnets, r.Subnet().String())
		}
		got = append(got, subnets)
	}
	if want := [][]string{{"fd00::/64", "fd01::/64"}, {"10.0.0.0/24", "10.0.1.0/24"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Families = %v, want %v", got, want)
	}
}

// PoolOf takes the pool's lock key and names the field of an invalid spec.
func TestPoolOf(t *testing.T) {
	inline := ippool("net-x.0123", span("10.0.0.4", "10.0.0.9"))
	inline.Annotations = map[string]string{v1alpha1.InlineNetworkAnnotation: "X_Net"}
	p, err := ipam.PoolOf(inline)
	if err != nil || p.Name != "net-x.0123" || p.Key != "X_Net" || len(p.Ranges) != 1 {
		t.Errorf("PoolOf = %+v, %v; want name net-x.0123, key X_Net, one range", p, err)
	}
	bad := ippool("bad", v1alpha1.PoolRange{Range: "10.0.0.0/24", RangeStart: "10.0.1.5"})
	if _, err := ipam.PoolOf(bad); err == nil || !strings.Contains(err.Error(), "spec.ranges[0].range_start") {
		t.Errorf("PoolOf(invalid) error = %v, want one naming spec.ranges[0].range_start", err)
	}
}
