// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// PoolStore is the narrow interface between the agent and IPPools.
type PoolStore interface {
	// Get returns the pool from the informer cache, reading it live when
	// the cache does not have it; ErrPoolMissing (wrapped) when it does not exist.
	Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPPool, error)
	// Create creates an inline network's pool; ErrTaken (wrapped) when a
	// pool of that name exists.
	Create(ctx context.Context, p *ipkeeperv1alpha1.IPPool) error
	// List returns every pool, from the cache or, with live, from the API
	// server. Callers must not modify what it returns.
	List(ctx context.Context, live bool) ([]ipkeeperv1alpha1.IPPool, error)
}

// ErrPoolMissing reports that an IPPool does not exist.
var ErrPoolMissing = errors.New("IPPool not found")

// poolView is what an allocation needs of the network's pool, read at the
// start of the request: the pool's live ranges (a range added a moment
// ago is used at once, one removed is not), and its reuse cooldown.
type poolView struct {
	name     string
	key      string          // what its reservations are named from (naming.PoolLockKey)
	ranges   []iprange.Range // spec order
	cooldown time.Duration
	// blocked are ranges of younger inline networks that overlap this
	// one's: theirs, never handed out here.
	blocked []iprange.Range
}

// isBlocked reports whether ip lies in a younger overlapping network's range.
func (p *poolView) isBlocked(ip netip.Addr) bool {
	for _, r := range p.blocked {
		if !ip.Less(r.Start()) && !r.End().Less(ip) {
			return true
		}
	}
	return false
}

// families groups the ranges by IP family, in order of first appearance:
// an allocation takes one address per family, from the first range of the
// family with one free.
func (p *poolView) families() [][]iprange.Range {
	var out [][]iprange.Range
	for _, r := range p.ranges {
		placed := false
		for i, f := range out {
			if f[0].Is4() == r.Is4() {
				out[i] = append(out[i], r)
				placed = true
				break
			}
		}
		if !placed {
			out = append(out, []iprange.Range{r})
		}
	}
	return out
}

// rangeFor returns the range whose subnet contains ip: the one whose
// prefix length and gateway an address of it is returned with.
func (p *poolView) rangeFor(ip netip.Addr) (iprange.Range, bool) {
	for _, r := range p.ranges {
		if r.Contains(ip) {
			return r, true
		}
	}
	return iprange.Range{}, false
}

// usable reports why no range of the pool may hand out ip now, or nil.
func (p *poolView) usable(ip netip.Addr) error {
	if p.isBlocked(ip) {
		return fmt.Errorf("%s is in the range of a younger inline network that overlaps IPPool %q", ip, p.name)
	}
	return iprange.UsableIn(p.ranges, ip, p.name)
}

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
// network's inline pool, created from the NAD on first use, and must carry
// the very definition the pool was created from: two NADs of one network
// that disagree would otherwise hand out each other's gateway or excluded
// addresses. An inline network whose ranges overlap those of an older
// inline network is refused, as both would hand out the same addresses.
func (a *Agent) resolvePool(ctx context.Context, req *request) (*poolView, error) {
	cfg := req.cfg
	name := cfg.PoolName()
	pool, err := a.poolStore.Get(ctx, name)
	created := false
	switch {
	case errors.Is(err, ErrPoolMissing) && cfg.Pool != "":
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
			"ipam.pool %q of network %q: IPPool %q does not exist; create it (see docs/pools.md) or fix the NAD", cfg.Pool, cfg.Name, cfg.Pool))
	case errors.Is(err, ErrPoolMissing):
		if pool, err = a.createInlinePool(ctx, req, name); err != nil {
			return nil, err
		}
		created = true
	case err != nil:
		return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("reading IPPool %q: %w", name, err))
	}
	var blocked []iprange.Range
	ranges, err := a.parsed.ranges(pool)
	if err != nil {
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("IPPool %q of network %q is invalid: %w; fix the pool (kubectl describe ippool %s)", name, cfg.Name, err, name))
	}
	if cfg.Pool == "" {
		if err := a.checkInlineDefinition(req, pool, ranges); err != nil {
			return nil, err
		}
		if blocked, err = a.checkInlineOverlap(ctx, req, pool, ranges, created); err != nil {
			return nil, err
		}
	}
	v := &poolView{name: name, key: naming.PoolLockKey(name, pool.Annotations[ipkeeperv1alpha1.InlineNetworkAnnotation]), ranges: ranges, blocked: blocked}
	if pool.Spec.ReuseCooldown != nil {
		v.cooldown = pool.Spec.ReuseCooldown.Duration
	}
	return v, nil
}

// createInlinePool creates the pool of a network whose NAD carries its
// ranges inline, from those ranges, recording the definition it was made
// from. The name is the lock: of two NADs racing, one creates it and the
// other must agree with it.
func (a *Agent) createInlinePool(ctx context.Context, req *request, name string) (*ipkeeperv1alpha1.IPPool, error) {
	// "NAD ns/name", or the pod whose args.cni carried the config.
	definedBy := "pod " + req.args.PodNamespace + "/" + req.args.PodName + " (args.cni)"
	if nad := req.attach.nad; nad != nil {
		definedBy = "NAD " + nad.String()
	}
	p := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{ipkeeperv1alpha1.InlineLabel: "true"},
			Annotations: map[string]string{
				ipkeeperv1alpha1.InlineDefinitionAnnotation: ipamconfig.Definition(req.cfg.Ranges),
				ipkeeperv1alpha1.DefinedByAnnotation:        definedBy,
				ipkeeperv1alpha1.InlineNetworkAnnotation:    req.cfg.Name,
			},
		},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: ipamconfig.SpecRanges(req.cfg.Ranges)},
	}
	if req.cfg.NetworkName != "" {
		p.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation] = req.cfg.NetworkName
	}
	err := a.poolStore.Create(ctx, p)
	switch {
	case err == nil:
		a.log.Info("created the inline pool of a network", "pool", name, "network", req.cfg.Name, "definedBy", definedBy)
		return p, nil
	case errors.Is(err, ErrTaken):
		cur, gerr := a.poolStore.Get(ctx, name)
		if gerr != nil {
			return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("reading IPPool %q: %w", name, gerr))
		}
		return cur, nil
	case apierrors.IsInvalid(err):
		// The API server's checks of a pool are stricter than none at all
		// (e.g. its limits on excludes): a configuration the pool cannot hold.
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("network %q: its ranges cannot be stored as IPPool %q: %w", req.cfg.Name, name, err))
	default:
		return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("creating the IPPool %q of network %q: %w", name, req.cfg.Name, err))
	}
}

// checkInlineDefinition refuses a NAD whose inline ranges differ from the
// definition of its network's pool: the one the pool was created from, or,
// for a pool made by hand, its spec.
func (a *Agent) checkInlineDefinition(req *request, pool *ipkeeperv1alpha1.IPPool, ranges []iprange.Range) error {
	want, inline := pool.Annotations[ipkeeperv1alpha1.InlineDefinitionAnnotation]
	if !inline {
		want = ipamconfig.Definition(ranges)
	}
	got := ipamconfig.Definition(req.cfg.Ranges)
	if got == want {
		return nil
	}
	return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
		"network %q has one definition, IPPool %q (%s%s), and the ipam ranges of %s differ from it (%s): "+
			"make the NAD's ranges match the pool's, or replace them with \"pool\": %q (see docs/pools.md)",
		req.cfg.Name, pool.Name, describeDefinition(want), a.definedBy(req, pool), a.thisNAD(req), describeDefinition(got), pool.Name))
}

// checkInlineOverlap refuses an inline network whose ranges overlap those
// of another inline network whose pool is as old or older, unless the two
// declare different ipam.network_name values (whereabouts' way of saying
// "separate L2 networks that may reuse addresses"). whereabouts shares
// addresses between such NADs; here each network has its own pool, so
// both would hand out the same addresses. Pools created within the same
// second refuse each other (neither can tell which came first). It returns
// the ranges of younger overlapping pools, which this network must not
// hand out either: its pool may have grown into theirs since, or been
// deleted and re-created. The pools are read from the cache, and live
// when the cache does not show this network's own pool yet (just created
// here or elsewhere): a cache that shows it shows every older pool too
// (a watch delivers in order), so two networks used for the first time at
// once on two nodes cannot both miss the other, and no ADD pays a live
// list once the cache has caught up.
func (a *Agent) checkInlineOverlap(ctx context.Context, req *request, pool *ipkeeperv1alpha1.IPPool, ranges []iprange.Range, created bool) (blocked []iprange.Range, err error) {
	pools, err := a.poolStore.List(ctx, created)
	if err == nil && !created && !slices.ContainsFunc(pools, func(p ipkeeperv1alpha1.IPPool) bool { return p.UID == pool.UID }) {
		pools, err = a.poolStore.List(ctx, true)
	}
	if err != nil {
		return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("listing IPPools to check network %q for overlap: %w", req.cfg.Name, err))
	}
	for i := range pools {
		other := &pools[i]
		if other.Name == pool.Name || other.Labels[ipkeeperv1alpha1.InlineLabel] != "true" ||
			other.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation] != pool.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation] {
			continue
		}
		otherRanges, err := a.parsed.ranges(other)
		if err != nil {
			continue
		}
		x, y, ok := ipamconfig.Overlapping(ranges, otherRanges)
		if !ok {
			continue
		}
		if pool.CreationTimestamp.Time.Before(other.CreationTimestamp.Time) && !pool.CreationTimestamp.IsZero() {
			blocked = append(blocked, otherRanges...)
			continue
		}
		return nil, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf(
			"network %q (%s): range %s overlaps range %s of IPPool %q (an inline network as old or older%s), so both would hand out the same addresses; "+
				"give the NADs of one L2 network the same \"name\" or set \"pool\" to one IPPool in each, and give separate L2 networks that reuse addresses each its own ipam.network_name (see docs/migrating-from-whereabouts.md)",
			req.cfg.Name, a.thisNAD(req), x.Subnet(), y.Subnet(), other.Name, a.definedBy(req, other)))
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

// definedBy says which NAD a pool was created from, when that NAD is in
// the requester's namespace: another tenant's objects are none of its
// business.
func (a *Agent) definedBy(req *request, pool *ipkeeperv1alpha1.IPPool) string {
	by := pool.Annotations[ipkeeperv1alpha1.DefinedByAnnotation]
	if by == "" {
		return ""
	}
	_, obj, _ := strings.Cut(by, " ") // "NAD ns/name" or "pod ns/name (args.cni)"
	if ns, _, ok := strings.Cut(obj, "/"); ok && ns == req.args.PodNamespace {
		return ", created from " + by
	}
	return ", created from a configuration in another namespace"
}

// describeDefinition renders a canonical definition for people:
// "10.0.0.0/24 10.0.0.1-10.0.0.254 gateway 10.0.0.1 exclude [10.0.0.5/32]".
func describeDefinition(def string) string {
	var ranges []ipkeeperv1alpha1.PoolRange
	if err := json.Unmarshal([]byte(def), &ranges); err != nil {
		return def
	}
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		s := r.Range + " " + r.RangeStart + "-" + r.RangeEnd
		if r.Gateway != "" {
			s += " gateway " + r.Gateway
		}
		if len(r.Exclude) > 0 {
			s += " exclude [" + strings.Join(r.Exclude, ", ") + "]"
		}
		parts[i] = s
	}
	return strings.Join(parts, "; ")
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

func (s *apiPoolStore) Create(ctx context.Context, p *ipkeeperv1alpha1.IPPool) error {
	s.metrics.apiWrites.WithLabelValues("create").Inc()
	err := s.live.Create(ctx, p)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: IPPool %s", ErrTaken, p.Name)
	}
	if err != nil {
		return fmt.Errorf("creating IPPool %s: %w", p.Name, err)
	}
	return nil
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

// prefixOf returns ip with the prefix length of the range containing it.
// An address the ranges no longer cover (a range was removed while it was
// held) keeps the family's first range's length: the pool says nothing
// better about it.
func (p *poolView) prefixOf(ip netip.Addr, family []iprange.Range) netip.Prefix {
	if r, ok := p.rangeFor(ip); ok {
		return netip.PrefixFrom(ip, r.Subnet().Bits())
	}
	return netip.PrefixFrom(ip, family[0].Subnet().Bits())
}
