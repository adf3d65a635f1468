// SPDX-License-Identifier: Apache-2.0

package blocks

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func blk(cidr, node string) *ipkeeperv1alpha1.IPBlock {
	return &ipkeeperv1alpha1.IPBlock{Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: "blue", CIDR: cidr, Holder: ipkeeperv1alpha1.HolderNode, Node: node}}
}

func claimsBlk(cidr string) *ipkeeperv1alpha1.IPBlock {
	return &ipkeeperv1alpha1.IPBlock{Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: "blue", CIDR: cidr, Holder: ipkeeperv1alpha1.HolderIPAMClaims}}
}

func TestSetSeesOverlapsGuessesAndFreedBlocks(t *testing.T) {
	now := time.Now()
	s := NewSet("node-a")
	p := netip.MustParsePrefix
	s.Record(blk("10.0.0.4/30", "node-b"))
	s.Record(blk("10.0.1.0/27", "node-b"))
	s.Record(blk("10.0.2.0/30", "node-a"))
	s.Record(claimsBlk("10.0.5.0/30"))
	for _, tt := range []struct {
		block string
		free  bool
	}{
		{"10.0.0.4/30", false}, // held
		{"10.0.0.0/30", true},
		{"10.0.0.0/27", false}, // holds a smaller held block
		{"10.0.1.8/30", true},  // inside a larger held block: no block of the geometry, ignored
		{"10.0.2.0/30", false}, // this holder's
		{"10.0.3.0/30", true},
		{"10.0.5.0/30", false}, // IPAMClaims'
	} {
		if got := s.Free("blue", p(tt.block)); got != tt.free {
			t.Errorf("Free(%s) = %v, want %v", tt.block, got, tt.free)
		}
	}
	if got := s.Own("blue"); len(got) != 1 || got[0] != p("10.0.2.0/30") {
		t.Errorf("Own = %v, want [10.0.2.0/30]", got)
	}
	if !s.Owns("blue", netip.MustParseAddr("10.0.2.1")) || s.Owns("blue", netip.MustParseAddr("10.0.0.5")) || s.Owns("green", netip.MustParseAddr("10.0.2.1")) {
		t.Errorf("Owns: wrong for an address of this holder's block, of another's, or of another pool")
	}

	// A create found it taken: held until a live list says by whom (or
	// that it went: see SetHeld below, which lacks it).
	s.Guess("blue", p("10.0.3.0/30"))
	if s.Free("blue", p("10.0.3.0/30")) {
		t.Errorf("a block a create found taken is not held")
	}

	// "No block free" stands until a block is deleted, at most noneFreeTTL.
	s.rememberNoneFree("k", now)
	if !s.noneFreeNow("k", now) || s.noneFreeNow("k", now.Add(noneFreeTTL)) {
		t.Errorf("noneFreeNow does not stand for exactly noneFreeTTL")
	}
	if mine := s.Forget(blk("10.0.0.4/30", "node-b")); mine {
		t.Errorf("Forget says node-b's block was node-a's")
	}
	if s.noneFreeNow("k", now) {
		t.Errorf("noneFreeNow stands after a block was deleted")
	}
	if !s.Free("blue", p("10.0.0.0/27")) || !s.Free("blue", p("10.0.0.4/30")) {
		t.Errorf("a deleted block is still held")
	}

	// A live list of the pool's blocks replaces what was known of others.
	s.SetHeld("blue", []ipkeeperv1alpha1.IPBlock{*blk("10.0.4.0/30", "node-c")})
	if !s.Free("blue", p("10.0.1.8/30")) || !s.Free("blue", p("10.0.3.0/30")) || s.Free("blue", p("10.0.4.0/30")) || s.Free("blue", p("10.0.2.0/30")) {
		t.Errorf("after a live list: node-b's unlisted block or the guessed one still held, node-c's listed one free, or this holder's own forgotten")
	}
	// A relist of this holder's blocks that lacks one: it went.
	if gone := s.ReplaceMine(nil); !gone || len(s.Own("blue")) != 0 {
		t.Errorf("a relist without this holder's block: gone %v, Own %v", gone, s.Own("blue"))
	}
	if gone := s.ReplaceMine([]*ipkeeperv1alpha1.IPBlock{blk("10.0.6.0/30", "node-a")}); gone || len(s.Own("blue")) != 1 {
		t.Errorf("a relist with a new block of this holder: gone %v, Own %v; want nothing gone, the new block owned", gone, s.Own("blue"))
	}
}

// A block larger than the one the pool's geometry gives (which no agent
// cuts: a compromised node's block covering a whole pool) does not keep
// other holders from taking the blocks inside it: they would all borrow.
// A smaller block inside a candidate (a subnet since widened) still holds
// it.
func TestSetIgnoresBlocksLargerThanTheGeometrys(t *testing.T) {
	s := NewSet("node-a")
	p := netip.MustParsePrefix
	s.Record(blk("10.9.0.0/16", "node-evil"))
	s.Record(blk("fd00:9::/64", "node-evil"))
	s.Record(blk("10.9.7.4/31", "node-b"))
	for _, tt := range []struct {
		block string
		free  bool
	}{
		{"10.9.3.0/27", true},
		{"10.9.200.32/30", true},
		{"fd00:9::100/120", true},
		{"10.9.7.4/30", false}, // holds a smaller held block
	} {
		if got := s.Free("blue", p(tt.block)); got != tt.free {
			t.Errorf("Free(%s) next to node-evil's 10.9.0.0/16 and fd00:9::/64 = %v, want %v", tt.block, got, tt.free)
		}
	}
}

// The controller's Set is keyed by holder "IPAMClaims": the blocks of
// holder IPAMClaims are its own, a node's are not, whatever the node's name.
func TestSetOfIPAMClaimsOwnsClaimsBlocksOnly(t *testing.T) {
	s := NewSet(string(ipkeeperv1alpha1.HolderIPAMClaims))
	s.Record(claimsBlk("10.0.0.0/30"))
	s.Record(blk("10.0.0.4/30", "node-a"))
	if got := s.Own("blue"); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/30")}) {
		t.Errorf("Own = %v, want only the IPAMClaims block 10.0.0.0/30", got)
	}
	if mine := s.Forget(claimsBlk("10.0.0.0/30")); !mine || len(s.Own("blue")) != 0 {
		t.Errorf("Forget of its own block = %v, Own after = %v", mine, s.Own("blue"))
	}
}

// fakeStore keeps IPBlocks in memory, its creates node-a's, and counts
// its calls.
type fakeStore struct {
	mu      sync.Mutex
	objs    map[netip.Prefix]*ipkeeperv1alpha1.IPBlock
	creates int
	lists   int
	// failCreate, when set, fails every create (not as ErrTaken).
	failCreate error
	// takeFirst, when set, has another holder take the block of the next
	// create just before it.
	takeFirst bool
}

func newFakeStore() *fakeStore {
	return &fakeStore{objs: map[netip.Prefix]*ipkeeperv1alpha1.IPBlock{}}
}

func (f *fakeStore) Create(_ context.Context, pool, key string, b netip.Prefix) (*ipkeeperv1alpha1.IPBlock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if f.failCreate != nil {
		return nil, f.failCreate
	}
	if f.takeFirst {
		f.takeFirst = false
		f.objs[b] = blk(b.String(), "node-z")
	}
	if _, ok := f.objs[b]; ok {
		return nil, fmt.Errorf("%w: IPBlock %s.%s", ErrTaken, key, b)
	}
	o := blk(b.String(), "node-a")
	o.Spec.Pool = pool
	f.objs[b] = o
	return o.DeepCopy(), nil
}

func (f *fakeStore) Held(_ context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var out []ipkeeperv1alpha1.IPBlock
	for _, b := range f.objs {
		if b.Spec.Pool == pool {
			out = append(out, *b.DeepCopy())
		}
	}
	return out, nil
}

func (f *fakeStore) counts() (creates, lists int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates, f.lists
}

// The Taker hands out addresses of its holder's blocks, takes a new block
// only when those are full, steps over a block another holder took since
// the list, and answers ErrNoBlock (remembered, without a new list) when
// none is free.
func TestTakerTakesBlocksOnlyWhenFull(t *testing.T) {
	// A /28 is four blocks of four (a small subnet is cut into blocks of
	// at least four addresses); its first and last addresses are not
	// handed out.
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.9.0.0/28")})
	store := newFakeStore()
	var took []string
	tk := &Taker{Set: NewSet("node-a"), Store: store, Took: func(b *ipkeeperv1alpha1.IPBlock) { took = append(took, b.Spec.CIDR) }}
	taken := map[netip.Addr]bool{}
	isTaken := func(ip netip.Addr) bool { return taken[ip] }
	ctx := context.Background()

	var got []netip.Addr
	for range 6 {
		ip, err := tk.Candidate(ctx, "blue", "blue", r, isTaken, "seed")
		if err != nil {
			t.Fatalf("Candidate after %v: %v", got, err)
		}
		if taken[ip] {
			t.Fatalf("Candidate returned %s, which is taken", ip)
		}
		taken[ip] = true
		got = append(got, ip)
	}
	for _, ip := range got {
		if !tk.Set.Owns("blue", ip) {
			t.Errorf("%s lies in no block of node-a (%v)", ip, tk.Set.Own("blue"))
		}
	}
	// Any two blocks hold six addresses (the outer blocks three each: the
	// range's first and last addresses are not handed out): a third block
	// taken means one was taken before the others were full.
	if creates, _ := store.counts(); creates != 2 || len(took) != 2 {
		t.Errorf("%d creates, blocks taken %v, for 6 addresses in blocks of 4, want 2", creates, took)
	}

	// Another holder takes the next block between the list and the create:
	// the Taker steps over it and takes another.
	store.takeFirst = true
	ownFull := func(ip netip.Addr) bool { return taken[ip] || tk.Set.Owns("blue", ip) }
	ip, err := tk.Candidate(ctx, "blue", "blue", r, ownFull, "seed")
	if err != nil || !tk.Set.Owns("blue", ip) || len(took) != 3 {
		t.Fatalf("Candidate with the next block taken by another holder = %s, %v (blocks taken %v); want an address of a third block", ip, err, took)
	}

	// Fill every address: then there is no block to take, and asking
	// again costs no list until a block goes.
	all := func(netip.Addr) bool { return true }
	if _, err := tk.Candidate(ctx, "blue", "blue", r, all, "seed"); !errors.Is(err, ErrNoBlock) {
		t.Fatalf("Candidate with every address taken = %v, want ErrNoBlock", err)
	}
	_, lists := store.counts()
	for range 5 {
		if _, err := tk.Candidate(ctx, "blue", "blue", r, all, "seed"); !errors.Is(err, ErrNoBlock) {
			t.Fatalf("Candidate again = %v, want ErrNoBlock", err)
		}
	}
	if _, again := store.counts(); again != lists {
		t.Errorf("%d more lists of blocks after none was free, want none until a block goes", again-lists)
	}
	// A block goes: the next Candidate looks again.
	for p, b := range store.objs {
		if b.Spec.Node != "node-a" {
			delete(store.objs, p)
			tk.Set.Forget(b)
			break
		}
	}
	_, _ = tk.Candidate(ctx, "blue", "blue", r, all, "seed")
	if _, again := store.counts(); again != lists+1 {
		t.Errorf("after a block went, %d lists, want one", again-lists)
	}
}

// A create that fails for another reason than a taken block (no right to
// take one, say) is reported through Failed and answered ErrNoBlock: the
// caller borrows instead.
func TestTakerBorrowsWhenACreateFails(t *testing.T) {
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.9.0.0/24")})
	store := newFakeStore()
	store.failCreate = errors.New("admission webhook denied the request")
	var failed []error
	tk := &Taker{Set: NewSet("node-a"), Store: store, Failed: func(err error) { failed = append(failed, err) }}
	_, err := tk.Candidate(context.Background(), "blue", "blue", r, func(netip.Addr) bool { return false }, "seed")
	if !errors.Is(err, ErrNoBlock) {
		t.Fatalf("Candidate with creates refused = %v, want ErrNoBlock", err)
	}
	if len(failed) != 1 || !errors.Is(failed[0], store.failCreate) {
		t.Errorf("Failed got %v, want the create's error once", failed)
	}
	if len(tk.Set.Own("blue")) != 0 {
		t.Errorf("a refused create left the holder a block: %v", tk.Set.Own("blue"))
	}
}

// The block that last gave an address is looked at first: with full
// blocks before it, an allocation does not walk each of them again.
func TestTakerLooksAtTheLastGivingBlockFirst(t *testing.T) {
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.9.0.0/24")})
	tk := &Taker{Set: NewSet("node-a"), Store: newFakeStore()}
	ctx := context.Background()
	taken := map[netip.Addr]bool{}
	looks := 0
	isTaken := func(ip netip.Addr) bool { looks++; return taken[ip] }
	for range 100 { // fills blocks and takes more
		ip, err := tk.Candidate(ctx, "blue", "blue", r, isTaken, "seed")
		if err != nil {
			t.Fatal(err)
		}
		taken[ip] = true
	}
	own := tk.Set.Own("blue")
	size := 1 << (32 - own[0].Bits())
	if len(own) < 3 {
		t.Fatalf("%d blocks of %d for 100 addresses, want at least 3", len(own), size)
	}
	looks = 0
	ip, err := tk.Candidate(ctx, "blue", "blue", r, isTaken, "seed")
	if err != nil || taken[ip] {
		t.Fatalf("Candidate = %s, %v", ip, err)
	}
	if looks > size {
		t.Errorf("an allocation looked at %d addresses with %d full blocks before the one with room; want at most that block's %d", looks, len(own)-1, size)
	}
	// A release in another block is found once the others are full.
	for _, b := range own {
		for a := b.Addr(); b.Contains(a); a = a.Next() {
			taken[a] = true
		}
	}
	freed := own[0].Addr().Next().Next()
	delete(taken, freed)
	if ip, err := tk.InOwn("blue", r, isTaken, "seed"); !err || ip != freed {
		t.Errorf("InOwn with only %s free = %s, %v; want it", freed, ip, err)
	}
}
