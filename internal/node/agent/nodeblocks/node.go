// SPDX-License-Identifier: Apache-2.0

package nodeblocks

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// ErrNoBlock means the node holds no block of the range with a free
// address and could take none: the agent borrows an address of the range.
var ErrNoBlock = blocks.ErrNoBlock

// Node is the address blocks of one node, as its agent knows them.
type Node struct {
	name  string
	set   *blocks.Set
	taker *blocks.Taker
	// owner is the owner of the node's new blocks; nil with NewWithStore.
	owner *nodeOwner
}

// Hooks count and report what a Node does; any may be nil.
type Hooks struct {
	// Read and Write count API calls by verb.
	Read, Write func(verb string)
	// Took is called after a block was taken.
	Took func()
	// Failed is called when taking a block failed for another reason
	// than another holder having it (the agent borrows meanwhile).
	Failed func(error)
}

// New returns the blocks of node, taken on the API server through c.
func New(c client.Client, node string, h Hooks) *Node {
	owner := &nodeOwner{c: c, node: node, read: h.Read}
	n := NewWithStore(node, &blocks.KubeStore{
		Client: c, Holder: ipkeeperv1alpha1.HolderNode, Node: node,
		Owner: owner.get,
		Writing: func(verb string) {
			if h.Write != nil {
				h.Write(verb)
			}
		},
	}, h.Took)
	n.owner = owner
	n.taker.Failed = h.Failed
	return n
}

// NewWithStore returns the blocks of node, taken through store (tests
// and simulations stand in for the API server with it).
func NewWithStore(node string, store blocks.Store, took func()) *Node {
	set := blocks.NewSet(node)
	t := &blocks.Taker{Set: set, Store: store}
	if took != nil {
		t.Took = func(*ipkeeperv1alpha1.IPBlock) { took() }
	}
	return &Node{name: node, set: set, taker: t}
}

// Set returns the set of blocks the node knows of.
func (n *Node) Set() *blocks.Set { return n.set }

// Candidate returns a free address of r in a block of pool this node
// holds, taking a new block (named from key, the pool's lock key) when
// those are full; ErrNoBlock when there is none to take. seed spreads
// holders over the range's addresses and blocks.
func (n *Node) Candidate(ctx context.Context, pool, key string, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	return n.taker.Candidate(ctx, pool, key, r, taken, seed)
}

// Watch starts the reflector of this node's IPBlocks, listing and
// watching through c, until ctx is done. hasSynced reports whether its
// first list has been delivered. Which blocks others hold is read live
// when the node takes one, so a block taken is not sent to every agent.
func (n *Node) Watch(ctx context.Context, c client.WithWatch) (hasSynced func() bool) {
	f := &feed{n: n}
	r := toolscache.NewReflectorWithOptions(listWatch(c, n.name), &ipkeeperv1alpha1.IPBlock{}, f,
		toolscache.ReflectorOptions{Name: "ipblocks of this node", TypeDescription: "ipkeeper.io/v1alpha1, Kind=IPBlock"})
	go r.RunWithContext(ctx)
	return f.synced.Load
}

// nodeOwner is the owner of the node's IPBlocks: its Node object, so
// that the garbage collector gives back the blocks of a node that is
// deleted.
type nodeOwner struct {
	c    client.Client
	node string
	read func(verb string)

	mu      sync.Mutex
	nodeRef *metav1.OwnerReference
}

// reset forgets the Node read: one of the node's blocks went, maybe
// because the Node was deleted (and recreated with another UID).
func (s *nodeOwner) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeRef = nil
}

// get returns the reference to the agent's Node, read once (until reset);
// nil when the Node does not exist (a simulated node), and then blocks
// have no owner.
func (s *nodeOwner) get(ctx context.Context, _ string) (*metav1.OwnerReference, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodeRef != nil {
		return s.nodeRef, nil
	}
	n := &corev1.Node{}
	if s.read != nil {
		s.read("get")
	}
	err := s.c.Get(ctx, client.ObjectKey{Name: s.node}, n)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Node %s, the owner of its IPBlocks: %w", s.node, err)
	}
	s.nodeRef = &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID, BlockOwnerDeletion: ptr.To(false)}
	return s.nodeRef, nil
}

// feed is where the reflector of this node's IPBlocks writes.
type feed struct {
	n      *Node
	synced atomic.Bool
}

var _ toolscache.ReflectorStore = (*feed)(nil)

func (f *feed) Add(obj any) error    { f.deliver(obj); return nil }
func (f *feed) Update(obj any) error { f.deliver(obj); return nil }
func (f *feed) Resync() error        { return nil }

func (f *feed) deliver(obj any) {
	if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && b.Spec.HolderName() == f.n.name {
		f.n.set.Record(b)
	}
}

func (f *feed) Delete(obj any) error {
	if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && f.n.set.Forget(b) {
		f.nodeMayHaveChanged()
	}
	return nil
}

func (f *feed) Replace(list []any, _ string) error {
	var mine []*ipkeeperv1alpha1.IPBlock
	for _, obj := range list {
		if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && b.Spec.HolderName() == f.n.name {
			mine = append(mine, b)
		}
	}
	if f.n.set.ReplaceMine(mine) {
		f.nodeMayHaveChanged()
	}
	f.synced.Store(true)
	return nil
}

// nodeMayHaveChanged: a block of this node went, maybe because its Node
// was deleted (and recreated with another UID), the owner of new blocks.
func (f *feed) nodeMayHaveChanged() {
	if f.n.owner != nil {
		f.n.owner.reset()
	}
}

// listWatch lists and watches the IPBlocks of node (by label).
func listWatch(c client.WithWatch, node string) *toolscache.ListWatch {
	selector := naming.NodeLabel + "=" + naming.NodeLabelValue(node)
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			l := &ipkeeperv1alpha1.IPBlockList{}
			if err := c.List(ctx, l, &client.ListOptions{Raw: &o, Limit: o.Limit, Continue: o.Continue}); err != nil {
				return nil, err
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return c.Watch(ctx, &ipkeeperv1alpha1.IPBlockList{}, &client.ListOptions{Raw: &o})
		},
	}
}
