// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"math/big"
	"net/netip"
	"slices"
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

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Address blocks. Each agent hands out its pods' addresses from aligned
// blocks of the pool's ranges that it holds (IPBlock objects, taken with
// create-as-lock like reservations), and labels those pods' reservations
// with its node (naming.NodeLabel). So it watches only its own node's
// labelled reservations plus every unlabelled one (claims', which move
// between nodes; borrowed addresses; other writers'), instead of every
// reservation of the cluster: the watch fan-out that grew with the number
// of nodes.
//
// A block is a hint, not a lock: the reservation's name still decides who
// holds an address. A labelled reservation another agent cannot see (left
// in a block whose node went away) only costs it a failed create, which it
// remembers as a conflict.
const (
	// blockHostBits4 and blockHostBits6 bound a block's host bits by family:
	// 32 IPv4 addresses, 256 IPv6 ones; smaller subnets have smaller blocks
	// (see blockOf).
	blockHostBits4 = 5
	blockHostBits6 = 8
	// blocksPerSubnet is how many blocks a small subnet is cut into, so
	// that a /24 shared by dozens of nodes gives each a block of its own
	// rather than a few nodes all of it; minBlockHostBits keeps a block at
	// four addresses or more.
	blocksPerSubnetBits = 6
	minBlockHostBits    = 2
	// maxBlockTries bounds the blocks an agent looks at when it needs a new
	// one (an IPv6 range has too many to look at all); past that, or when
	// every block is held, it borrows.
	maxBlockTries = 4096
	// noBlockTTL bounds how long an agent that found no block to take
	// borrows without looking again, when no block goes meanwhile.
	noBlockTTL = 30 * time.Second
	// borrowTTL is how long a borrowing ADD reuses the live list of an
	// earlier one on the node.
	borrowTTL = 10 * time.Second
)

// errNoBlock means the agent holds no block of the range with a free
// address and could take none: it borrows an address from the whole range.
var errNoBlock = errors.New("no free address block")

// BlockStore is the narrow interface between the agent and IPBlocks.
type BlockStore interface {
	// Create creates a block for the agent's node; ErrTaken (wrapped) when
	// a block of that name exists.
	Create(ctx context.Context, b *ipkeeperv1alpha1.IPBlock) error
	// Held lists, live, the blocks of a pool, whoever holds them.
	Held(ctx context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error)
}

// blockOf returns the block of r that ip lies in. A block's size depends
// only on r's subnet, so every agent cuts a range the same way, and a
// change of its start or end keeps the blocks.
func blockOf(r iprange.Range, ip netip.Addr) netip.Prefix {
	subnet := r.Subnet()
	limit := blockHostBits4
	if !r.Is4() {
		limit = blockHostBits6
	}
	hostBits := subnet.Addr().BitLen() - subnet.Bits()
	host := min(limit, max(minBlockHostBits, hostBits-blocksPerSubnetBits), hostBits)
	return netip.PrefixFrom(ip, subnet.Addr().BitLen()-host).Masked()
}

// blockRange returns the part of r that block b covers, or false when r
// hands out none of b's addresses.
func blockRange(r iprange.Range, b netip.Prefix) (iprange.Range, bool) {
	if !r.Subnet().Contains(b.Addr()) {
		return iprange.Range{}, false
	}
	start, end := b.Addr(), iprange.LastAddr(b)
	if start.Less(r.Start()) {
		start = r.Start()
	}
	if r.End().Less(end) {
		end = r.End()
	}
	if end.Less(start) {
		return iprange.Range{}, false
	}
	sub, err := iprange.New(iprange.Spec{Subnet: r.Subnet(), Start: start, End: end, Gateway: r.Gateway(), Exclude: r.Excludes()})
	return sub, err == nil
}

// blocksFrom yields up to maxBlockTries blocks of r, starting at one
// derived from the node so that agents taking their first blocks at once
// do not all race for the same one, and wrapping around.
func blocksFrom(r iprange.Range, node string) iter.Seq[netip.Prefix] {
	return func(yield func(netip.Prefix) bool) {
		first, last := blockOf(r, r.Start()), blockOf(r, r.End())
		size := new(big.Int).Lsh(big.NewInt(1), uint(max(0, first.Addr().BitLen()-first.Bits()))) //nolint:gosec // 0 to 128
		base := new(big.Int).SetBytes(first.Addr().AsSlice())
		n := new(big.Int).Sub(new(big.Int).SetBytes(last.Addr().AsSlice()), base)
		n.Div(n, size).Add(n, big.NewInt(1))
		sum := sha256.Sum256([]byte(node))
		offset := new(big.Int).Mod(new(big.Int).SetBytes(sum[:16]), n)
		tries := maxBlockTries
		if n.IsInt64() && n.Int64() < int64(tries) {
			tries = int(n.Int64())
		}
		buf := make([]byte, first.Addr().BitLen()/8)
		k := new(big.Int)
		for i := range tries {
			k.Add(offset, big.NewInt(int64(i))).Mod(k, n).Mul(k, size).Add(k, base)
			addr, _ := netip.AddrFromSlice(k.FillBytes(buf))
			if !yield(netip.PrefixFrom(addr, first.Bits())) {
				return
			}
		}
	}
}

// blockSet is what the agent knows of IPBlocks: per pool, the blocks its
// node holds (from a watch of its node's blocks and, ahead of it, its own
// creates), and who held the others when it last looked (a live list
// when it takes a block, and creates that found a block taken).
type blockSet struct {
	node string
	mu   sync.RWMutex
	// held maps, per pool, each held block to its node ("" when only a
	// create that found it taken says it is held); a live list replaces
	// it whenever the agent takes a block.
	held map[string]map[netip.Prefix]string
	// lengths counts, per pool, the held blocks of each prefix length:
	// blocks of another length (cut from a subnet since changed) may
	// overlap a block about to be taken.
	lengths map[string]map[int]int
	// mine holds, per pool, the blocks of this node, in address order.
	mine map[string][]netip.Prefix
	// freed counts deleted blocks: a block that went may be taken again.
	freed uint64
	// noBlock remembers, per pool and range, that no block was free to take.
	noBlock map[string]noBlockMemo
	// taking serialises taking a new block per pool, so the ADDs of one
	// node that all find their blocks full take one block, not one each.
	taking *keyLocks
}

type noBlockMemo struct {
	freed uint64
	at    time.Time
}

func newBlockSet(node string) *blockSet {
	return &blockSet{
		node: node, held: map[string]map[netip.Prefix]string{}, lengths: map[string]map[int]int{},
		mine: map[string][]netip.Prefix{}, noBlock: map[string]noBlockMemo{}, taking: newKeyLocks(),
	}
}

// observe records a block the informer delivered or this agent created.
func (s *blockSet) observe(b *ipkeeperv1alpha1.IPBlock) {
	p, err := netip.ParsePrefix(b.Spec.CIDR)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdLocked(b.Spec.Pool, p.Masked(), b.Spec.Node)
}

// setHeld records the blocks of a pool a live list found, and this node's.
func (s *blockSet) setHeld(pool string, blocks []ipkeeperv1alpha1.IPBlock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, pool)
	delete(s.lengths, pool)
	for _, p := range s.mine[pool] {
		s.holdLocked(pool, p, s.node)
	}
	for _, b := range blocks {
		if p, err := netip.ParsePrefix(b.Spec.CIDR); err == nil && b.Spec.Pool == pool {
			s.holdLocked(pool, p.Masked(), b.Spec.Node)
		}
	}
}

// replaceMine takes the full list of this node's blocks (a relist):
// those it lacks went. It reports whether any went.
func (s *blockSet) replaceMine(blocks []*ipkeeperv1alpha1.IPBlock) bool {
	listed := map[string]map[netip.Prefix]bool{}
	for _, b := range blocks {
		if p, err := netip.ParsePrefix(b.Spec.CIDR); err == nil {
			if listed[b.Spec.Pool] == nil {
				listed[b.Spec.Pool] = map[netip.Prefix]bool{}
			}
			listed[b.Spec.Pool][p.Masked()] = true
		}
	}
	var gone []*ipkeeperv1alpha1.IPBlock
	s.mu.RLock()
	for pool, ps := range s.mine {
		for _, p := range ps {
			if !listed[pool][p] {
				gone = append(gone, &ipkeeperv1alpha1.IPBlock{Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: pool, CIDR: p.String(), Node: s.node}})
			}
		}
	}
	s.mu.RUnlock()
	for _, b := range gone {
		s.forget(b)
	}
	for _, b := range blocks {
		s.observe(b)
	}
	return len(gone) > 0
}

// guess records that someone holds block p of pool (a create found it
// taken), until the next live list says who.
func (s *blockSet) guess(pool string, p netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[pool][p]; !ok {
		s.holdLocked(pool, p, "")
	}
}

func (s *blockSet) holdLocked(pool string, p netip.Prefix, node string) {
	m := s.held[pool]
	if m == nil {
		m = map[netip.Prefix]string{}
		s.held[pool] = m
		s.lengths[pool] = map[int]int{}
	}
	if _, ok := m[p]; !ok {
		s.lengths[pool][p.Bits()]++
	}
	m[p] = node
	if node == s.node && !slices.Contains(s.mine[pool], p) {
		s.mine[pool] = append(s.mine[pool], p)
		slices.SortFunc(s.mine[pool], func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	}
}

// forget drops a deleted block of this node: its agent no longer hands
// it out. It reports whether the block was this node's.
func (s *blockSet) forget(b *ipkeeperv1alpha1.IPBlock) bool {
	p, err := netip.ParsePrefix(b.Spec.CIDR)
	if err != nil {
		return false
	}
	p = p.Masked()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freed++
	pool := b.Spec.Pool
	if _, ok := s.held[pool][p]; ok {
		delete(s.held[pool], p)
		if s.lengths[pool][p.Bits()]--; s.lengths[pool][p.Bits()] <= 0 {
			delete(s.lengths[pool], p.Bits())
		}
		if len(s.held[pool]) == 0 {
			delete(s.held, pool)
			delete(s.lengths, pool)
		}
	}
	if b.Spec.Node != s.node {
		return false
	}
	s.mine[pool] = slices.DeleteFunc(s.mine[pool], func(x netip.Prefix) bool { return x == p })
	if len(s.mine[pool]) == 0 {
		delete(s.mine, pool)
	}
	return true
}

// free reports whether nobody holds block p of pool, nor a block of
// another size overlapping it.
func (s *blockSet) free(pool string, p netip.Prefix) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	held := s.held[pool]
	for bits := range s.lengths[pool] {
		if bits <= p.Bits() {
			if _, ok := held[netip.PrefixFrom(p.Addr(), bits).Masked()]; ok {
				return false
			}
			continue
		}
		// Smaller blocks inside p (a subnet since widened): look at each.
		for q := range held {
			if q.Bits() == bits && p.Contains(q.Addr()) {
				return false
			}
		}
	}
	return true
}

// own returns the blocks of a pool this node holds, in address order.
func (s *blockSet) own(pool string) []netip.Prefix {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.mine[pool])
}

// noneFree reports whether a look for a block (of the range key names)
// found none within noBlockTTL, with no block freed since.
func (s *blockSet) noneFree(key string, now time.Time) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.noBlock[key]
	return ok && m.freed == s.freed && now.Sub(m.at) < noBlockTTL
}

func (s *blockSet) rememberNoneFree(key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, m := range s.noBlock {
		if now.Sub(m.at) >= noBlockTTL {
			delete(s.noBlock, k)
		}
	}
	s.noBlock[key] = noBlockMemo{freed: s.freed, at: now}
}

// blockCandidate returns a free address of r in a block this node holds,
// taking a new block when those are full; errNoBlock when there is none
// to take.
func (a *Agent) blockCandidate(ctx context.Context, req *request, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, error) {
	pool := req.pool.name
	if ip, ok := a.inOwnBlocks(pool, r, taken, seed); ok {
		return ip, nil
	}
	memo := exhaustedKey(pool, r)
	if a.blocks.noneFree(memo, time.Now()) {
		return netip.Addr{}, errNoBlock
	}
	unlock := a.blocks.taking.lock(pool)
	defer unlock()
	// Another ADD may have taken a block meanwhile.
	if ip, ok := a.inOwnBlocks(pool, r, taken, seed); ok {
		return ip, nil
	}
	held, err := a.blockStore.Held(ctx, pool)
	if err != nil {
		a.noteBlockError(err)
		return netip.Addr{}, errNoBlock
	}
	a.blocks.setHeld(pool, held)
	for b := range blocksFrom(r, a.opts.NodeName) {
		if !a.blocks.free(pool, b) {
			continue
		}
		sub, ok := blockRange(r, b)
		if !ok {
			continue
		}
		ip, err := allocator.Candidate(sub, taken, seed)
		if err != nil {
			continue // nothing free there that this agent can see
		}
		blk := &ipkeeperv1alpha1.IPBlock{
			ObjectMeta: metav1.ObjectMeta{
				Name: naming.Block(req.pool.key, b),
				Labels: map[string]string{
					naming.PoolLabel: naming.PoolLabelValue(pool), naming.NodeLabel: naming.NodeLabelValue(a.opts.NodeName),
				},
			},
			Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: pool, CIDR: b.String(), Node: a.opts.NodeName},
		}
		err = a.blockStore.Create(ctx, blk)
		switch {
		case errors.Is(err, ErrTaken):
			// Another node took it since the list.
			a.blocks.guess(pool, b)
			continue
		case err != nil:
			// Blocks only spare watch traffic: without one (no right to
			// take it yet, say, while an upgrade rolls out), borrow.
			a.noteBlockError(err)
			return netip.Addr{}, errNoBlock
		}
		a.metrics.blocksTaken.Inc()
		a.blocks.observe(blk)
		return ip, nil
	}
	a.blocks.rememberNoneFree(memo, time.Now())
	return netip.Addr{}, errNoBlock
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

// inOwnBlocks returns a free address of r in the blocks of the pool this
// node holds. Blocks cut from r's subnet before it changed are left alone.
func (a *Agent) inOwnBlocks(pool string, r iprange.Range, taken func(netip.Addr) bool, seed string) (netip.Addr, bool) {
	for _, b := range a.blocks.own(pool) {
		if blockOf(r, b.Addr()) != b {
			continue
		}
		sub, ok := blockRange(r, b)
		if !ok {
			continue
		}
		if ip, err := allocator.Candidate(sub, taken, seed); err == nil {
			return ip, true
		}
	}
	return netip.Addr{}, false
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

// apiBlockStore implements BlockStore with an uncached client. A block's
// owner is its node's Node object, so that the garbage collector gives
// back the blocks of a node that is deleted.
type apiBlockStore struct {
	c       client.Client
	node    string
	metrics *metrics

	mu      sync.Mutex
	nodeRef *metav1.OwnerReference
}

func (s *apiBlockStore) Create(ctx context.Context, b *ipkeeperv1alpha1.IPBlock) error {
	if ref, err := s.owner(ctx); err != nil {
		return err
	} else if ref != nil {
		b.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	s.metrics.apiWrites.WithLabelValues("create").Inc()
	err := s.c.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: IPBlock %s", ErrTaken, b.Name)
	}
	if err != nil {
		return fmt.Errorf("creating IPBlock %s: %w", b.Name, err)
	}
	return nil
}

func (s *apiBlockStore) Held(ctx context.Context, pool string) ([]ipkeeperv1alpha1.IPBlock, error) {
	var list ipkeeperv1alpha1.IPBlockList
	if err := s.c.List(ctx, &list, client.MatchingLabels{naming.PoolLabel: naming.PoolLabelValue(pool)}); err != nil {
		return nil, fmt.Errorf("listing the IPBlocks of pool %q: %w", pool, err)
	}
	return list.Items, nil
}

// resetOwner forgets the Node read: one of the node's blocks went, maybe
// because the Node was deleted (and recreated with another UID).
func (s *apiBlockStore) resetOwner() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeRef = nil
}

// owner returns the reference to the agent's Node, read once (until
// resetOwner); nil when the Node does not exist (a simulated node), and
// then blocks have no owner.
func (s *apiBlockStore) owner(ctx context.Context) (*metav1.OwnerReference, error) {
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
	if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && b.Spec.Node == f.a.opts.NodeName {
		f.a.blocks.observe(b)
	}
}

func (f *blockFeed) Delete(obj any) error {
	if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && f.a.blocks.forget(b) {
		f.nodeMayHaveChanged()
	}
	return nil
}

func (f *blockFeed) Replace(list []any, _ string) error {
	var mine []*ipkeeperv1alpha1.IPBlock
	for _, obj := range list {
		if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok && b.Spec.Node == f.a.opts.NodeName {
			mine = append(mine, b)
		}
	}
	if f.a.blocks.replaceMine(mine) {
		f.nodeMayHaveChanged()
	}
	f.synced.Store(true)
	return nil
}

// nodeMayHaveChanged: a block of this node went, maybe because its Node
// was deleted (and recreated with another UID), the owner of new blocks.
func (f *blockFeed) nodeMayHaveChanged() {
	if r, ok := f.a.blockStore.(interface{ resetOwner() }); ok {
		r.resetOwner()
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
