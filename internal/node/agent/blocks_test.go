// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/node/agent/nodeblocks"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// fakeBlocks is the blocks.Store of the agents of several nodes: it keeps
// IPBlocks in memory and tells the block set of a new block's node, as
// its agent's watch would.
type fakeBlocks struct {
	mu      sync.Mutex
	objs    map[string]*ipkeeperv1alpha1.IPBlock
	sets    map[string]*blocks.Set // node -> its agent's set
	creates int
}

func newFakeBlocks() *fakeBlocks {
	return &fakeBlocks{objs: map[string]*ipkeeperv1alpha1.IPBlock{}, sets: map[string]*blocks.Set{}}
}

// storeOf returns the blocks.Store of node's agent: what it creates is
// node's.
func (f *fakeBlocks) storeOf(node string) blocks.Store { return nodeBlocks{f, node} }

func (f *fakeBlocks) createCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates
}

type nodeBlocks struct {
	f    *fakeBlocks
	node string
}

func (s nodeBlocks) Create(_ context.Context, pool, key string, p netip.Prefix) (*ipkeeperv1alpha1.IPBlock, error) {
	f := s.f
	b := &ipkeeperv1alpha1.IPBlock{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Block(key, p)},
		Spec:       ipkeeperv1alpha1.IPBlockSpec{Pool: pool, CIDR: p.String(), Holder: ipkeeperv1alpha1.HolderNode, Node: s.node},
	}
	f.mu.Lock()
	f.creates++
	if _, ok := f.objs[b.Name]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: IPBlock %s", blocks.ErrTaken, b.Name)
	}
	f.objs[b.Name] = b.DeepCopy()
	set := f.sets[s.node]
	f.mu.Unlock()
	if set != nil {
		set.Record(b)
	}
	return b, nil
}

func (s nodeBlocks) Held(_ context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error) {
	f := s.f
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

// withBlocks gives a test agent blocks taken through store, as New does
// with the API server.
func withBlocks(a *Agent, store *fakeBlocks) {
	node := a.opts.NodeName
	a.blocks = nodeblocks.NewWithStore(node, store.storeOf(node), a.metrics.blocksTaken.Inc)
	store.mu.Lock()
	store.sets[node] = a.blocks.Set()
	store.mu.Unlock()
	a.engine = a.newEngine()
}

// blockAgents returns agents of the named nodes on one store, taking
// blocks from one fake. Each index learns only its own writes: no agent
// sees another's labelled reservations, as with the scoped watches.
func blockAgents(t *testing.T, store *fakeStore, nodes ...string) ([]*Agent, *fakeBlocks) {
	fb := newFakeBlocks()
	var agents []*Agent
	for _, n := range nodes {
		a := newTestAgent(t, store, newFakeClaims())
		a.opts.NodeName = n
		a.reservations = index.New(n)
		withBlocks(a, fb)
		agents = append(agents, a)
	}
	return agents, fb
}

func TestAgentsHandOutAddressesOfTheirOwnBlocks(t *testing.T) {
	store := newFakeStore()
	agents, fb := blockAgents(t, store, "node-a", "node-b")
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
	for _, b := range fb.objs {
		held[b.Spec.CIDR] = b.Spec.Node
	}
	if len(held) != 4 {
		t.Errorf("%d blocks taken for 2x40 addresses, want 4 (two /27s per node)", len(held))
	}
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.5.0.0/20")})
	for _, res := range store.all() {
		ip := netip.MustParseAddr(res.Spec.IP)
		if node := held[r.BlockOf(ip).String()]; node != res.Spec.Node {
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
		if got := rs[0].Labels[naming.NodeLabel]; got != naming.SharedNodeLabelValue {
			t.Errorf("the borrowed %s is labelled %s=%q, want %q: node-a, whose block it lies in, would not see it", rs[0].Spec.IP, naming.NodeLabel, got, naming.SharedNodeLabelValue)
		}
		// node-a's watch delivers shared reservations.
		if e, ok := index.EntryOf(rs[0]); ok {
			a.reservations.Watched(e)
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
