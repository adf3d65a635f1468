// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestBlockGeometry(t *testing.T) {
	for _, tt := range []struct{ subnet, ip, want, why string }{
		{"10.1.0.0/20", "10.1.3.77", "10.1.3.64/27", "32 IPv4 addresses"},
		{"10.2.0.0/24", "10.2.0.10", "10.2.0.8/30", "a /24 is cut into 64 blocks of 4"},
		{"10.2.0.8/30", "10.2.0.10", "10.2.0.8/30", "a /30 is one block"},
		{"10.2.0.8/31", "10.2.0.9", "10.2.0.8/31", "a subnet smaller than the smallest block is one block"},
		{"fd00::/64", "fd00::1:2", "fd00::1:0/120", "256 IPv6 addresses"},
	} {
		r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix(tt.subnet)})
		if got := blockOf(r, netip.MustParseAddr(tt.ip)); got != netip.MustParsePrefix(tt.want) {
			t.Errorf("block of %s in %s = %s, want %s (%s)", tt.ip, tt.subnet, got, tt.want, tt.why)
		}
	}

	// A range that starts and ends inside blocks, with an exclude and a gateway.
	r := iprange.MustNew(iprange.Spec{
		Subnet: netip.MustParsePrefix("10.3.0.0/20"), Start: netip.MustParseAddr("10.3.0.10"), End: netip.MustParseAddr("10.3.0.200"),
		Gateway: netip.MustParseAddr("10.3.0.33"), Exclude: []netip.Prefix{netip.MustParsePrefix("10.3.0.64/27")},
	})
	blocks := slices.Collect(blocksFrom(r, "node-a"))
	if len(blocks) != 7 { // 10.3.0.0/27 .. 10.3.0.192/27
		t.Fatalf("blocks of 10.3.0.10-10.3.0.200 = %v, want the 7 /27s it touches", blocks)
	}
	seen := map[netip.Prefix]bool{}
	for _, b := range blocks {
		if seen[b] || b.Bits() != 27 || !r.Subnet().Contains(b.Addr()) {
			t.Errorf("block %s repeated or not a /27 of the range", b)
		}
		seen[b] = true
	}
	if slices.Collect(blocksFrom(r, "node-b"))[0] == blocks[0] && slices.Collect(blocksFrom(r, "node-c"))[0] == blocks[0] {
		t.Errorf("three nodes start at the same block %s: agents would race for it", blocks[0])
	}
	for _, tt := range []struct {
		block      string
		start, end string // "" when the range hands out nothing there
	}{
		{"10.3.0.0/27", "10.3.0.10", "10.3.0.31"},
		{"10.3.0.32/27", "10.3.0.32", "10.3.0.63"},
		{"10.3.0.64/27", "", ""},
		{"10.3.0.192/27", "10.3.0.192", "10.3.0.200"},
		{"10.3.0.224/27", "", ""},
		{"10.4.0.0/27", "", ""},
	} {
		sub, ok := blockRange(r, netip.MustParsePrefix(tt.block))
		if ok != (tt.start != "") {
			t.Errorf("blockRange(%s) ok = %v, want %v", tt.block, ok, tt.start != "")
			continue
		}
		if !ok {
			continue
		}
		if sub.Start().String() != tt.start || sub.End().String() != tt.end {
			t.Errorf("blockRange(%s) = %s-%s, want %s-%s", tt.block, sub.Start(), sub.End(), tt.start, tt.end)
		}
		if sub.Usable(netip.MustParseAddr("10.3.0.33")) == nil {
			t.Errorf("blockRange(%s) hands out the gateway", tt.block)
		}
	}

	huge := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("fd00::/48")})
	if got := len(slices.Collect(blocksFrom(huge, "node-a"))); got != maxBlockTries {
		t.Errorf("a /48 yields %d blocks to try, want at most %d", got, maxBlockTries)
	}
}

// fakeBlocks keeps IPBlocks in memory and tells the block set of the
// agent of a new one's node, as its watch would.
type fakeBlocks struct {
	mu        sync.Mutex
	objs      map[string]*ipkeeperv1alpha1.IPBlock
	observers []*blockSet
}

func (f *fakeBlocks) Create(_ context.Context, b *ipkeeperv1alpha1.IPBlock) error {
	f.mu.Lock()
	if _, ok := f.objs[b.Name]; ok {
		f.mu.Unlock()
		return fmt.Errorf("%w: IPBlock %s", ErrTaken, b.Name)
	}
	f.objs[b.Name] = b.DeepCopy()
	obs := f.observers
	f.mu.Unlock()
	for _, s := range obs {
		if s.node == b.Spec.Node {
			s.observe(b)
		}
	}
	return nil
}

func (f *fakeBlocks) Held(_ context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ipkeeperv1alpha1.IPBlock
	for _, b := range f.objs {
		if b.Spec.Pool == pool {
			out = append(out, *b.DeepCopy())
		}
	}
	return out, nil
}

// blockAgents returns agents of the named nodes on one store, taking
// blocks from one fake. Each index learns only its own writes: no agent
// sees another's labelled reservations, as with the scoped watches.
func blockAgents(t *testing.T, store *fakeStore, nodes ...string) ([]*Agent, *fakeBlocks) {
	blocks := &fakeBlocks{objs: map[string]*ipkeeperv1alpha1.IPBlock{}}
	var agents []*Agent
	for _, n := range nodes {
		a := newTestAgent(t, store, newFakeClaims())
		a.opts.NodeName = n
		a.idx = newNodeIndex(n)
		a.blocks = newBlockSet(n)
		a.blockStore = blocks
		blocks.observers = append(blocks.observers, a.blocks)
		agents = append(agents, a)
	}
	return agents, blocks
}

func TestAgentsHandOutAddressesOfTheirOwnBlocks(t *testing.T) {
	store := newFakeStore()
	agents, blocks := blockAgents(t, store, "node-a", "node-b")
	conf := `{"cniVersion":"1.0.0","name":"blue","type":"bridge","ipam":{"type":"ipkeeper","range":"10.5.0.0/20"}}`
	const perNode = 40 // more than one block (32 addresses) each
	for i := range perNode {
		for k, a := range agents {
			uid := types2.UID(fmt.Sprintf("p%d-%d", k, i))
			if _, err := addVia(t, a, conf, "c-"+string(uid), uid); err != nil {
				t.Fatalf("ADD %s on %s: %v", uid, a.opts.NodeName, err)
			}
		}
	}
	if got := store.count("list"); got != 0 {
		t.Errorf("%d live lists while blocks were free, want none", got)
	}
	for _, a := range agents {
		if got := a.metrics.conflicts; counterValue(t, got) != 0 {
			t.Errorf("%s met %v conflicts: blocks should keep agents apart", a.opts.NodeName, counterValue(t, got))
		}
	}
	held := map[string]string{} // block CIDR -> node
	for _, b := range blocks.objs {
		held[b.Spec.CIDR] = b.Spec.Node
	}
	if len(held) != 4 {
		t.Errorf("%d blocks taken for 2x40 addresses, want 4 (two /27s per node)", len(held))
	}
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.5.0.0/20")})
	for _, res := range store.all() {
		ip := netip.MustParseAddr(res.Spec.IP)
		if node := held[blockOf(r, ip).String()]; node != res.Spec.Node {
			t.Errorf("%s of %s lies in a block of %q", ip, res.Spec.Node, node)
		}
		if got := res.Labels[naming.NodeLabel]; got != res.Spec.Node {
			t.Errorf("reservation %s labelled %s=%q, want its node %q", res.Name, naming.NodeLabel, got, res.Spec.Node)
		}
	}
}

func TestAgentBorrowsWhenEveryBlockIsHeld(t *testing.T) {
	store := newFakeStore()
	agents, _ := blockAgents(t, store, "node-a", "node-b")
	a, b := agents[0], agents[1]
	// A /29 is two blocks of three usable addresses: node-a takes both
	// with its first four ADDs.
	conf := `{"cniVersion":"1.0.0","name":"small","type":"bridge","ipam":{"type":"ipkeeper","range":"10.6.0.0/29"}}`
	for i := range 4 {
		uid := types2.UID(fmt.Sprintf("a%d", i))
		if _, err := addVia(t, a, conf, "c-"+string(uid), uid); err != nil {
			t.Fatalf("ADD %d on node-a: %v", i, err)
		}
	}
	if _, err := addVia(t, b, conf, "c-b0", "b0"); err != nil {
		t.Fatalf("node-b, with no block to take, did not borrow: %v", err)
	}
	// Its next borrowing ADD shares the first one's list: the pool's last
	// free address.
	if _, err := addVia(t, b, conf, "c-b1", "b1"); err != nil {
		t.Fatalf("node-b's second borrowing ADD: %v", err)
	}
	if lists := store.count("list"); lists != 1 {
		t.Errorf("two borrowing ADDs made %d live lists, want 1 (the second shares the first's)", lists)
	}
	for _, uid := range []types2.UID{"b0", "b1"} {
		rs := reservationsOwnedBy(store, uid)
		if len(rs) != 1 {
			t.Fatalf("%s owns %d reservations, want 1", uid, len(rs))
		}
		if _, labelled := rs[0].Labels[naming.NodeLabel]; labelled {
			t.Errorf("the borrowed %s is labelled %s: node-a, whose block it lies in, would not see it", rs[0].Spec.IP, naming.NodeLabel)
		}
		// node-a's watch delivers unlabelled reservations.
		if e, ok := entryOf(rs[0]); ok {
			a.idx.observe(e)
		}
	}

	// Full now: node-a finds its blocks full, no block to take, and a live
	// list confirms it, without a failed create.
	if _, err := addVia(t, a, conf, "c-a4", "a4"); reasonOf(err) != reasonExhausted {
		t.Fatalf("ADD into a full pool on node-a: %v, want exhausted", err)
	}
	if c := counterValue(t, a.metrics.conflicts); c != 0 {
		t.Errorf("node-a met %v conflicts: it sees the borrowed addresses", c)
	}

	// ADDs retried on node-b are refused with O(1) live reads.
	before := store.count("list")
	for i := range 20 {
		_, err := addVia(t, b, conf, fmt.Sprintf("c-x%d", i), types2.UID(fmt.Sprintf("x%d", i)))
		if reasonOf(err) != reasonExhausted {
			t.Fatalf("ADD into a full pool: %v, want exhausted", err)
		}
	}
	if lists := store.count("list") - before; lists > 1 {
		t.Errorf("20 ADDs into a full pool made %d live lists, want at most 1", lists)
	}
}

func TestBlockSetSeesOverlapsGuessesAndFreedBlocks(t *testing.T) {
	now := time.Now()
	s := newBlockSet("node-a")
	blk := func(cidr, node string) *ipkeeperv1alpha1.IPBlock {
		return &ipkeeperv1alpha1.IPBlock{Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: "blue", CIDR: cidr, Node: node}}
	}
	p := netip.MustParsePrefix
	s.observe(blk("10.0.0.4/30", "node-b"))
	s.observe(blk("10.0.1.0/27", "node-b"))
	s.observe(blk("10.0.2.0/30", "node-a"))
	for _, tt := range []struct {
		block string
		free  bool
	}{
		{"10.0.0.4/30", false}, // held
		{"10.0.0.0/30", true},
		{"10.0.0.0/27", false}, // holds a smaller held block
		{"10.0.1.8/30", false}, // inside a larger held block
		{"10.0.2.0/30", false}, // this node's
		{"10.0.3.0/30", true},
	} {
		if got := s.free("blue", p(tt.block)); got != tt.free {
			t.Errorf("free(%s) = %v, want %v", tt.block, got, tt.free)
		}
	}
	if got := s.own("blue"); len(got) != 1 || got[0] != p("10.0.2.0/30") {
		t.Errorf("own = %v, want [10.0.2.0/30]", got)
	}

	// A create found it taken: held until a live list says by whom (or
	// that it went: see setHeld below, which lacks it).
	s.guess("blue", p("10.0.3.0/30"))
	if s.free("blue", p("10.0.3.0/30")) {
		t.Errorf("a block a create found taken is not held")
	}

	// "No block free" stands until a block is deleted.
	s.rememberNoneFree("k", now)
	if !s.noneFree("k", now) || s.noneFree("k", now.Add(noBlockTTL)) {
		t.Errorf("noneFree does not stand for noBlockTTL")
	}
	if mine := s.forget(blk("10.0.0.4/30", "node-b")); mine {
		t.Errorf("forget says node-b's block was this node's")
	}
	if s.noneFree("k", now) {
		t.Errorf("noneFree stands after a block was deleted")
	}
	if !s.free("blue", p("10.0.0.0/27")) || !s.free("blue", p("10.0.0.4/30")) {
		t.Errorf("a deleted block is still held")
	}

	// A live list of the pool's blocks replaces what was known of others.
	s.setHeld("blue", []ipkeeperv1alpha1.IPBlock{*blk("10.0.4.0/30", "node-c")})
	if !s.free("blue", p("10.0.1.8/30")) || !s.free("blue", p("10.0.3.0/30")) || s.free("blue", p("10.0.4.0/30")) || s.free("blue", p("10.0.2.0/30")) {
		t.Errorf("after a live list: node-b's unlisted block or the guessed one still held, node-c's listed one free, or this node's own forgotten")
	}
	// A relist of this node's blocks that lacks one: it went.
	if gone := s.replaceMine(nil); !gone || len(s.own("blue")) != 0 {
		t.Errorf("a relist without this node's block: gone %v, own %v", gone, s.own("blue"))
	}
}

// The launchers of a migrating VM, on two nodes, may both make the first
// allocation of its claim, each before seeing the other's reservations.
// They must meet on the same addresses (the second adopts the first's),
// not take one each from their own blocks: the loser's would be left for
// a release that may fail.
func TestClaimsFirstAllocationMeetsAcrossNodes(t *testing.T) {
	store := newFakeStore()
	agents, _ := blockAgents(t, store, "node-a", "node-b")
	claim := testClaim("claim-uid-m")
	for _, a := range agents {
		a.claims = newFakeClaims(claim.DeepCopy()) // neither sees the other's status write
	}
	var got []string
	for k, a := range agents {
		pod := testPod(fmt.Sprintf("virt-launcher-vm1-%d", k), types2.UID(fmt.Sprintf("launcher-%d", k)))
		req := testRequest(t, cniproto.CmdAdd, dualStackConf, fmt.Sprintf("sandbox-%d", k), pod)
		pool, err := a.resolvePool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		req.pool = pool
		ips, err := a.allocateForClaim(context.Background(), req, pod, claim.Name)
		if err != nil {
			t.Fatalf("claim ADD on %s: %v", a.opts.NodeName, err)
		}
		got = append(got, formatIPs(ips))
	}
	if got[0] != got[1] {
		t.Errorf("the two launchers got %s and %s, want the same addresses", got[0], got[1])
	}
	if n := len(reservationsOwnedBy(store, claim.UID)); n != 2 {
		t.Errorf("the claim owns %d reservations, want 2 (one per family)", n)
	}
	for _, r := range reservationsOwnedBy(store, claim.UID) {
		if _, labelled := r.Labels[naming.NodeLabel]; labelled {
			t.Errorf("claim reservation %s is labelled %s: other nodes, where the VM may move, would not see it", r.Name, naming.NodeLabel)
		}
	}
}
