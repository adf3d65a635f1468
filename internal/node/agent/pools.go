// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// PoolStore is the narrow interface between the agent and IPPools, which
// it only reads.
type PoolStore interface {
	// Get returns the pool from the informer cache, reading it live when
	// the cache does not have it; ErrPoolMissing (wrapped) when it does not exist.
	Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPPool, error)
	// Cached returns the pool from the informer cache only;
	// ErrPoolMissing (wrapped) when the cache does not have it.
	Cached(ctx context.Context, name string) (*ipkeeperv1alpha1.IPPool, error)
	// List returns every pool, from the cache or, with live, from the API
	// server. Callers must not modify what it returns.
	List(ctx context.Context, live bool) ([]ipkeeperv1alpha1.IPPool, error)
}

// ErrPoolMissing reports that an IPPool does not exist.
var ErrPoolMissing = errors.New("IPPool not found")

// parsedPools caches the parsed ranges of each pool by UID and generation,
// so an ADD does not re-parse an unchanged spec.
type parsedPools struct {
	mu sync.Mutex
	m  map[string]parsedPool
}

type parsedPool struct {
	uid        types.UID
	generation int64
	ranges     []iprange.Range
	err        error
}

func (c *parsedPools) ranges(p *ipkeeperv1alpha1.IPPool) ([]iprange.Range, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]parsedPool{}
	}
	if got, ok := c.m[p.Name]; ok && got.uid == p.UID && got.generation == p.Generation && p.Generation != 0 {
		return got.ranges, got.err
	}
	rs, err := ipamconfig.PoolRanges(&p.Spec)
	c.m[p.Name] = parsedPool{uid: p.UID, generation: p.Generation, ranges: rs, err: err}
	return rs, err
}

// resolvePool returns the pool an ADD or CHECK allocates from. A NAD that
// names a pool uses that IPPool. A NAD with inline ranges uses its
// network's inline pool, which ipkeeper-controller makes from the NAD
// (package inlinepool): the agent never makes or changes a pool. Until the
// pool exists the ADD waits (bounded, --pool-wait-timeout) and then
// answers "try again later" naming the NAD; an inline network that
// overlaps another, which the controller refuses to make a pool for, and a
// NAD whose ranges differ from its network's pool are configuration
// errors naming both.
func (a *Agent) resolvePool(ctx context.Context, req *request) (*ipam.Pool, error) {
	cfg := req.cfg
	name := cfg.PoolName()
	pool, err := a.poolStore.Get(ctx, name)
	switch {
	case errors.Is(err, ErrPoolMissing) && cfg.Pool != "":
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
			"ipam.pool %q of network %q: IPPool %q does not exist; create it (see docs/pools.md) or fix the NAD", cfg.Pool, cfg.Name, cfg.Pool))
	case errors.Is(err, ErrPoolMissing):
		if pool, err = a.waitInlinePool(ctx, req, name); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("reading IPPool %q: %w", name, err))
	}
	var blocked []iprange.Range
	ranges, err := a.parsed.ranges(pool)
	if err != nil {
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("IPPool %q of network %q is invalid: %w; fix the pool (kubectl describe ippool %s)", name, cfg.Name, err, name))
	}
	if cfg.Pool == "" {
		if d := inlinepool.CheckDefinition(cfg, pool, ranges); d != nil {
			return nil, fail(reasonInvalid, codeInvalidConfig, errors.New(d.Explain(req.args.PodNamespace, a.thisNAD(req))))
		}
		if blocked, err = a.checkInlineOverlap(ctx, req, pool, ranges); err != nil {
			return nil, err
		}
	}
	v := ipam.NewPool(pool, ranges)
	v.Overlapped = blocked
	return v, nil
}

// waitInlinePool waits for ipkeeper-controller to make the pool of an
// inline network from its NAD, reading the agent's cache of pools (no API
// request while it waits). A network the controller refuses to make a
// pool for (it overlaps another inline network) is refused at once.
func (a *Agent) waitInlinePool(ctx context.Context, req *request, name string) (*ipkeeperv1alpha1.IPPool, error) {
	if _, err := a.checkInlineOverlap(ctx, req, nil, req.cfg.Ranges); err != nil {
		return nil, err
	}
	var pool *ipkeeperv1alpha1.IPPool
	err := wait.PollUntilContextTimeout(ctx, poolWaitInterval, a.opts.PoolWaitTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := a.poolStore.Cached(ctx, name)
		pool = p
		return err == nil, nil
	})
	if err == nil {
		return pool, nil
	}
	if p, err := a.poolStore.Get(ctx, name); err == nil {
		return p, nil // the cache was behind
	}
	return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf(
		"network %q: its IPPool %q does not exist after %s; ipkeeper-controller makes it from %s (is it running? its events on the NAD say why not: kubectl describe network-attachment-definition)",
		req.cfg.Name, name, a.opts.PoolWaitTimeout, a.thisNAD(req)))
}

// poolWaitInterval is how often a waiting ADD looks at the cache for its pool.
const poolWaitInterval = 100 * time.Millisecond

// checkInlineOverlap refuses an inline network whose ranges overlap those
// of another inline network whose pool is as old or older (every one,
// while the network has no pool: pool is nil), unless the two declare
// different ipam.network_name values (inlinepool.FindOverlap); it returns
// the ranges of younger overlapping pools, which this network must not
// hand out either. The pools are read from the cache, and live when the
// cache does not show this network's own pool yet (made a moment ago): a
// cache that shows it shows every older pool too (a watch delivers in
// order), and no ADD pays a live list once the cache has caught up.
func (a *Agent) checkInlineOverlap(ctx context.Context, req *request, pool *ipkeeperv1alpha1.IPPool, ranges []iprange.Range) (blocked []iprange.Range, err error) {
	pools, err := a.poolStore.List(ctx, false)
	if err == nil && pool != nil && !slices.ContainsFunc(pools, func(p ipkeeperv1alpha1.IPPool) bool { return p.UID == pool.UID }) {
		pools, err = a.poolStore.List(ctx, true)
	}
	if err != nil {
		return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("listing IPPools to check network %q for overlap: %w", req.cfg.Name, err))
	}
	// The network_name a pool was made with is the network's, whichever
	// NAD asks (as the controller judges it).
	networkName := req.cfg.NetworkName
	if pool != nil {
		networkName = pool.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation]
	}
	blocked, refused := inlinepool.FindOverlap(req.cfg.Name, networkName, ranges, pool, pools, a.parsed.ranges)
	if refused != nil {
		return nil, fail(reasonInvalid, codeInvalidConfig, errors.New(refused.Explain(req.args.PodNamespace, a.thisNAD(req))))
	}
	return blocked, nil
}

// thisNAD names the requester's NAD, which the requester may know.
func (a *Agent) thisNAD(req *request) string {
	if req.attach.nad != nil {
		return "NAD " + req.attach.nad.String()
	}
	return "this network's configuration"
}

// apiPoolStore implements PoolStore with the agent's cache and live client.
type apiPoolStore struct {
	cached  client.Reader
	live    client.Client
	metrics *metrics
}

func (s *apiPoolStore) Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPPool, error) {
	p := &ipkeeperv1alpha1.IPPool{}
	err := s.cached.Get(ctx, client.ObjectKey{Name: name}, p)
	if apierrors.IsNotFound(err) {
		// The cache may not show a pool created a moment ago.
		s.metrics.apiReads.WithLabelValues("get").Inc()
		err = s.live.Get(ctx, client.ObjectKey{Name: name}, p)
	}
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrPoolMissing, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading IPPool %s: %w", name, err)
	}
	return p, nil
}

func (s *apiPoolStore) Cached(ctx context.Context, name string) (*ipkeeperv1alpha1.IPPool, error) {
	p := &ipkeeperv1alpha1.IPPool{}
	err := s.cached.Get(ctx, client.ObjectKey{Name: name}, p)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrPoolMissing, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading IPPool %s from the cache: %w", name, err)
	}
	return p, nil
}

func (s *apiPoolStore) List(ctx context.Context, live bool) ([]ipkeeperv1alpha1.IPPool, error) {
	var list ipkeeperv1alpha1.IPPoolList
	if live {
		s.metrics.apiReads.WithLabelValues("list").Inc()
		if err := s.live.List(ctx, &list); err != nil {
			return nil, fmt.Errorf("listing IPPools: %w", err)
		}
		return list.Items, nil
	}
	// Every ADD of an inline network checks it against every pool: the
	// cache's objects are read, never changed, so they need no copy.
	if err := s.cached.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing IPPools: %w", err)
	}
	return list.Items, nil
}

// admitsNew applies the pool's spec.namespaceSelector to a pod ADD that
// would reserve a new address. An attachment that holds its addresses
// already (the runtime's repeated ADD, a new sandbox of a running pod)
// keeps them, and CHECK never asks: a selector changes who gets new
// addresses, never takes a running pod's (docs/pools.md). A claim's
// addresses were chosen by ipkeeper-controller, which applied the rule
// when it did.
func (a *Agent) admitsNew(ctx context.Context, req *request, podUID types.UID) error {
	if req.attach.claim != "" || len(a.reservations.Attachment(req.pool.Name, podUID, req.IfName)) > 0 {
		return nil
	}
	return a.poolAdmits(ctx, req.pool.Object, req.args.PodNamespace)
}

// poolAdmits applies the pool's spec.namespaceSelector (ipamconfig.PoolAdmits)
// to the pod's namespace, read live only for a pool that has one.
func (a *Agent) poolAdmits(ctx context.Context, pool *ipkeeperv1alpha1.IPPool, namespace string) error {
	if pool.Spec.NamespaceSelector == nil {
		return nil
	}
	var labels map[string]string
	if a.live != nil {
		var ns corev1.Namespace
		a.metrics.apiReads.WithLabelValues("get").Inc()
		if err := a.live.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
			return fail(reasonInternal, codeTryAgainLater, fmt.Errorf("reading namespace %s for IPPool %q's spec.namespaceSelector: %w", namespace, pool.Name, err))
		}
		labels = ns.Labels
	}
	if err := ipamconfig.PoolAdmits(pool, namespace, labels); err != nil {
		return fail(reasonInvalid, codeInvalidConfig, err)
	}
	return nil
}
