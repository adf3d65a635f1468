// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Address blocks (package blocks). Each agent hands out its pods'
// addresses from aligned blocks of the pool's ranges that it holds, and
// labels those pods' reservations with its node (naming.NodeLabel). So it
// watches only its own node's labelled reservations plus the unlabelled
// ones (borrowed addresses, static ones, other writers'), instead of every
// reservation of the cluster: the watch fan-out that grew with the number
// of nodes. IPAMClaims' addresses lie in blocks ipkeeper-controller holds,
// which no agent hands out, so no agent watches them.
//
// A block is a hint, not a lock: the reservation's name still decides who
// holds an address. A labelled reservation another agent cannot see (left
// in a block whose node went away) only costs it a failed create, which it
// remembers as a conflict.

// borrowTTL is how long a borrowing ADD reuses the live list of an
// earlier one on the node.
const borrowTTL = 10 * time.Second

// blockCandidate returns a free address of r in a block this node holds,
// taking a new block when those are full; blocks.ErrNoBlock when there is
// none to take.
func (a *Agent) blockCandidate(ctx context.Context, req *request, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	return a.taker.Candidate(ctx, req.pool.name, req.pool.key, r, taken, seed)
}

// noteBlockError logs a failure to take a block, at most once a minute.
func (a *Agent) noteBlockError(err error) {
	now := time.Now()
	if last := a.blockErrorLogged.Load(); last != 0 && now.Sub(time.Unix(0, last)) < time.Minute {
		return
	}
	a.blockErrorLogged.Store(now.UnixNano())
	a.log.Error(err, "cannot take an address block; borrowing addresses instead (every agent then watches their reservations)")
}

// borrowSnapshots keeps, per pool, the last live list a borrowing ADD
// made, for the node's next borrowing ADDs.
type borrowSnapshots struct {
	mu sync.Mutex
	m  map[string]borrowSnapshot
}

type borrowSnapshot struct {
	taken func(netip.Addr) bool
	at    time.Time
}

func (b *borrowSnapshots) get(pool string, now time.Time) (func(netip.Addr) bool, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.m[pool]
	if !ok || now.Sub(s.at) >= borrowTTL {
		delete(b.m, pool)
		return nil, false
	}
	return s.taken, true
}

func (b *borrowSnapshots) put(pool string, taken func(netip.Addr) bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]borrowSnapshot{}
	}
	for p, s := range b.m {
		if now.Sub(s.at) >= borrowTTL {
			delete(b.m, p)
		}
	}
	b.m[pool] = borrowSnapshot{taken: taken, at: now}
}

// nodeOwner is the owner of the node's IPBlocks: its Node object, so
// that the garbage collector gives back the blocks of a node that is
// deleted.
type nodeOwner struct {
	c       client.Client
	node    string
	metrics *metrics

	mu      sync.Mutex
	nodeRef *metav1.OwnerReference
}

// resetOwner forgets the Node read: one of the node's blocks went, maybe
// because the Node was deleted (and recreated with another UID).
func (s *nodeOwner) resetOwner() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeRef = nil
}

// owner returns the reference to the agent's Node, read once (until
// resetOwner); nil when the Node does not exist (a simulated node), and
// then blocks have no owner.
func (s *nodeOwner) owner(ctx context.Context, _ string) (*metav1.OwnerReference, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodeRef != nil {
		return s.nodeRef, nil
	}
	n := &corev1.Node{}
	s.metrics.apiReads.WithLabelValues("get").Inc()
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

// blockFeed is where the reflector of this node's IPBlocks writes.
type blockFeed struct {
	a      *Agent
	synced atomic.Bool
}

var _ toolscache.ReflectorStore = (*blockFeed)(nil)

func (f *blockFeed) Add(obj any) error    { f.observe(obj); return nil }
func (f *blockFeed) Update(obj any) error { f.observe(obj); return nil }
func (f *blockFeed) Resync() error        { return nil }

func (f *blockFeed) observe(obj any) {
	if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && b.Spec.HolderName() == f.a.opts.NodeName {
		f.a.blocks.Observe(b)
	}
}

func (f *blockFeed) Delete(obj any) error {
	if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && f.a.blocks.Forget(b) {
		f.nodeMayHaveChanged()
	}
	return nil
}

func (f *blockFeed) Replace(list []any, _ string) error {
	var mine []*ipkeeperv1alpha1.IPBlock
	for _, obj := range list {
		if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && b.Spec.HolderName() == f.a.opts.NodeName {
			mine = append(mine, b)
		}
	}
	if f.a.blocks.ReplaceMine(mine) {
		f.nodeMayHaveChanged()
	}
	f.synced.Store(true)
	return nil
}

// nodeMayHaveChanged: a block of this node went, maybe because its Node
// was deleted (and recreated with another UID), the owner of new blocks.
func (f *blockFeed) nodeMayHaveChanged() {
	if f.a.blockOwner != nil {
		f.a.blockOwner.resetOwner()
	}
}

// HasSynced reports whether the first list has been delivered.
func (f *blockFeed) HasSynced() bool { return f.synced.Load() }

// blockListWatch lists and watches the IPBlocks of node (by label).
func blockListWatch(c client.WithWatch, node string) *toolscache.ListWatch {
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
