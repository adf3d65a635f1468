// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// fakeStore is an in-memory Store with the API server's semantics that
// matter to allocation: names are unique, every write bumps the
// resourceVersion, Update and Delete honour their preconditions. Hooks let
// a test inject what a real API server and network can do at any call.
type fakeStore struct {
	mu    sync.Mutex
	objs  map[string]*ipkeeperv1alpha1.IPReservation
	rv    int
	calls map[string]int

	// beforeCreate runs before a create is applied; a non-nil error fails
	// the call without applying it.
	beforeCreate func(r *ipkeeperv1alpha1.IPReservation) error
	// afterUpdate runs after an update was applied; a non-nil error is
	// what Update returns (an answer lost).
	afterUpdate func(r *ipkeeperv1alpha1.IPReservation) error
	// afterCreate runs after a create was applied; a non-nil error is what
	// the caller sees (a response lost after the server applied it).
	afterCreate func(r *ipkeeperv1alpha1.IPReservation) error
	// beforeDelete runs before a delete is applied.
	beforeDelete func(name string) error
}

func newFakeStore() *fakeStore {
	return &fakeStore{objs: map[string]*ipkeeperv1alpha1.IPReservation{}, calls: map[string]int{}}
}

func (s *fakeStore) count(verb string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[verb]
}

// writes counts the calls that would change a reservation: creates,
// updates, deletes and retirements, applied or refused.
func (s *fakeStore) writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls["create"] + s.calls["update"] + s.calls["delete"] + s.calls["retire"]
}

func (s *fakeStore) nextRV() string {
	s.rv++
	return strconv.Itoa(s.rv)
}

// put stores r as if another agent had created it, and returns the stored copy.
func (s *fakeStore) put(r *ipkeeperv1alpha1.IPReservation) *ipkeeperv1alpha1.IPReservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := r.DeepCopy()
	if c.UID == "" {
		c.UID = types.UID("uid-" + c.Name + "-" + strconv.Itoa(s.rv+1))
	}
	c.ResourceVersion = s.nextRV()
	s.objs[c.Name] = c
	return c.DeepCopy()
}

// modify changes a stored reservation as another writer would.
func (s *fakeStore) modify(name string, f func(*ipkeeperv1alpha1.IPReservation)) *ipkeeperv1alpha1.IPReservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objs[name]
	f(o)
	o.ResourceVersion = s.nextRV()
	return o.DeepCopy()
}

func (s *fakeStore) get(name string) (*ipkeeperv1alpha1.IPReservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[name]
	if !ok {
		return nil, false
	}
	return o.DeepCopy(), true
}

func (s *fakeStore) all() []*ipkeeperv1alpha1.IPReservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*ipkeeperv1alpha1.IPReservation
	for _, o := range s.objs {
		out = append(out, o.DeepCopy())
	}
	return out
}

func (s *fakeStore) Create(_ context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	if s.beforeCreate != nil {
		if err := s.beforeCreate(r); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.calls["create"]++
	if _, ok := s.objs[r.Name]; ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: reservation %s", ErrTaken, r.Name)
	}
	s.rv++
	r.UID = types.UID(fmt.Sprintf("uid-%s-%d", r.Name, s.rv))
	r.ResourceVersion = strconv.Itoa(s.rv)
	r.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s.objs[r.Name] = r.DeepCopy()
	s.mu.Unlock()
	if s.afterCreate != nil {
		return s.afterCreate(r)
	}
	return nil
}

func (s *fakeStore) Get(_ context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["get"]++
	o, ok := s.objs[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrGone, name)
	}
	return o.DeepCopy(), nil
}

func (s *fakeStore) Update(_ context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["update"]++
	o, ok := s.objs[r.Name]
	if !ok || r.ResourceVersion != o.ResourceVersion || (r.UID != "" && r.UID != o.UID) {
		return fmt.Errorf("%w: updating reservation %s", ErrChanged, r.Name)
	}
	c := r.DeepCopy()
	c.UID = o.UID
	c.ResourceVersion = s.nextRV()
	s.objs[r.Name] = c
	r.ResourceVersion = c.ResourceVersion
	if s.afterUpdate != nil {
		return s.afterUpdate(r)
	}
	return nil
}

func (s *fakeStore) TakenIn(_ context.Context, pool string) (map[netip.Addr]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["list"]++
	out := map[netip.Addr]bool{}
	for _, o := range s.objs {
		if o.Spec.Pool == pool {
			out[netip.MustParseAddr(o.Spec.IP)] = true
		}
	}
	return out, nil
}

func (s *fakeStore) HeldIn(_ context.Context, pool, namespace string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["list"]++
	n := 0
	for _, o := range s.objs {
		if o.Spec.Pool == pool && o.Spec.Owner.Namespace == namespace {
			n++
		}
	}
	return n, nil
}

func (s *fakeStore) WithMAC(_ context.Context, pool string, mac net.HardwareAddr) ([]ipkeeperv1alpha1.IPReservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["list"]++
	var out []ipkeeperv1alpha1.IPReservation
	for _, o := range s.objs {
		if o.Spec.Pool == pool && o.Labels[macaddr.Label] == macaddr.LabelValue(mac) {
			out = append(out, *asServed(o))
		}
	}
	return out, nil
}

// asServed is r as the API server returns it: its times in whole
// seconds, as metav1.Time serializes them.
func asServed(r *ipkeeperv1alpha1.IPReservation) *ipkeeperv1alpha1.IPReservation {
	r = r.DeepCopy()
	for _, t := range []*metav1.Time{r.Spec.AttachedAt, r.Spec.ReuseAfter} {
		if t != nil {
			t.Time = t.Truncate(time.Second)
		}
	}
	return r
}

func (s *fakeStore) Delete(_ context.Context, name string, uid types.UID, rv string) error {
	if s.beforeDelete != nil {
		if err := s.beforeDelete(name); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["delete"]++
	o, ok := s.objs[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrGone, name)
	}
	if o.UID != uid || (rv != "" && o.ResourceVersion != rv) {
		return fmt.Errorf("%w: %s", ErrChanged, name)
	}
	delete(s.objs, name)
	return nil
}

func (s *fakeStore) Retire(_ context.Context, name string, uid types.UID, rv string, reuseAfter time.Time) (*ipkeeperv1alpha1.IPReservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["retire"]++
	o, ok := s.objs[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrGone, name)
	}
	if o.UID != uid || o.ResourceVersion != rv {
		return nil, fmt.Errorf("%w: %s", ErrChanged, name)
	}
	if o.Spec.Released() {
		// The CRD's rule: reuseAfter cannot change once set.
		return nil, fmt.Errorf("reservation %s: spec: Invalid value: reuseAfter cannot change once set", name)
	}
	o.Spec.ReuseAfter = &metav1.Time{Time: reuseAfter}
	o.ResourceVersion = s.nextRV()
	return o.DeepCopy(), nil
}

// fakeClaims is an in-memory ClaimStore with resourceVersion semantics.
// The agent only reads claims (ClaimStore has no write): the test writes
// them, as ipkeeper-controller would.
type fakeClaims struct {
	mu     sync.Mutex
	claims map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim
	rv     int
	// changed is closed, and replaced, at every write: what a watch of
	// the claim would deliver to a waiting Wait.
	changed chan struct{}
	// waiting receives a claim's key each time a Wait finds it missing or
	// without addresses and starts waiting: a test writes the claim once
	// the ADD waits for it, with no sleep.
	waiting chan types.NamespacedName
	// failGet, once, is returned instead of reading a claim.
	failGet error
}

func newFakeClaims(cs ...*ipamclaimsv1alpha1.IPAMClaim) *fakeClaims {
	f := &fakeClaims{
		claims:  map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{},
		changed: make(chan struct{}),
		waiting: make(chan types.NamespacedName, 16),
	}
	for _, c := range cs {
		f.put(c)
	}
	return f
}

// wroteLocked bumps the resourceVersion and wakes the waiting Waits.
func (f *fakeClaims) wroteLocked(c *ipamclaimsv1alpha1.IPAMClaim) {
	f.rv++
	c.ResourceVersion = strconv.Itoa(f.rv)
	close(f.changed)
	f.changed = make(chan struct{})
}

// put creates or replaces a claim.
func (f *fakeClaims) put(c *ipamclaimsv1alpha1.IPAMClaim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c = c.DeepCopy()
	f.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
	f.wroteLocked(c)
}

// setStatusIPs writes status.ips as ipkeeper-controller would.
func (f *fakeClaims) setStatusIPs(ns, name string, ips ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.claims[types.NamespacedName{Namespace: ns, Name: name}]
	c.Status.IPs = ips
	f.wroteLocked(c)
}

func (f *fakeClaims) Get(_ context.Context, ns, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failGet; err != nil {
		f.failGet = nil
		return nil, err
	}
	c, ok := f.claims[types.NamespacedName{Namespace: ns, Name: name}]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s", errClaimMissing, ns, name)
	}
	return c.DeepCopy(), nil
}

// Wait has apiClaimStore.Wait's contract: the claim once it exists and
// records addresses, else, after timeout, errClaimMissing (wrapped) or a
// *noAddressesError with the claim as last seen.
func (f *fakeClaims) Wait(ctx context.Context, ns, name string, timeout time.Duration) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	announced := false
	for {
		f.mu.Lock()
		if err := f.failGet; err != nil {
			f.failGet = nil
			f.mu.Unlock()
			return nil, err
		}
		var last *ipamclaimsv1alpha1.IPAMClaim
		if c, ok := f.claims[key]; ok {
			last = c.DeepCopy()
		}
		changed := f.changed
		f.mu.Unlock()
		if last != nil && usable(last) {
			return last, nil
		}
		if !announced {
			announced = true
			select {
			case f.waiting <- key:
			default:
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if last == nil {
				return nil, fmt.Errorf("%w: %s/%s did not appear within %s", errClaimMissing, ns, name, timeout)
			}
			return nil, &noAddressesError{claim: last, timeout: timeout}
		}
	}
}

// newTestAgent builds an agent for node-a on fake stores, with no API
// server: for unit tests of allocation and release. It has no block taker:
// addresses come from the whole range.
func newTestAgent(t testing.TB, store Store, claims ClaimStore) *Agent {
	t.Helper()
	a := &Agent{
		opts:         Options{NodeName: "node-a", ClaimWaitTimeout: time.Second, PoolWaitTimeout: time.Second, CNIGCMinAge: time.Minute},
		log:          logr.Discard(),
		store:        store,
		claims:       claims,
		poolStore:    newFakePoolStore(),
		reservations: index.New(""),
		locks:        newKeyLocks(),

		uncertain: newUncertainCreates(),
	}
	m, err := newMetrics(prometheus.NewRegistry(), a.reservations.Len, a.Ready)
	if err != nil {
		t.Fatal(err)
	}
	a.metrics = m
	a.engine = a.newEngine()
	return a
}

// fakePoolStore keeps IPPools in memory; the agent only reads them, the
// test writes them as an admin or ipkeeper-controller would.
type fakePoolStore struct {
	mu    sync.Mutex
	pools map[string]*ipkeeperv1alpha1.IPPool
	n     int
	// failGet, while set, is returned instead of reading a pool.
	failGet error
	// cachedReads counts Cached calls: the polls of an ADD waiting for
	// its inline pool.
	cachedReads int
	// missed receives the name of a pool a Cached call did not find: an
	// ADD waits for it.
	missed chan string
}

func newFakePoolStore() *fakePoolStore {
	return &fakePoolStore{pools: map[string]*ipkeeperv1alpha1.IPPool{}, missed: make(chan string, 1)}
}

func (s *fakePoolStore) Get(_ context.Context, name string) (*ipkeeperv1alpha1.IPPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failGet != nil {
		return nil, fmt.Errorf("reading IPPool %s: %w", name, s.failGet)
	}
	p, ok := s.pools[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrPoolMissing, name)
	}
	return p.DeepCopy(), nil
}

func (s *fakePoolStore) Cached(_ context.Context, name string) (*ipkeeperv1alpha1.IPPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cachedReads++
	p, ok := s.pools[name]
	if !ok {
		select {
		case s.missed <- name:
		default:
		}
		return nil, fmt.Errorf("%w: %s", ErrPoolMissing, name)
	}
	return p.DeepCopy(), nil
}

func (s *fakePoolStore) cachedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cachedReads
}

// put stores a pool as an admin would write it (or replaces its spec),
// bumping the generation; what the API server stamps (UID, creation
// time, a second apart) is stamped here.
func (s *fakePoolStore) put(p *ipkeeperv1alpha1.IPPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.pools[p.Name]; ok {
		c := old.DeepCopy()
		c.Spec = p.Spec
		c.Generation++
		s.pools[p.Name] = c
		return
	}
	s.n++
	c := p.DeepCopy()
	c.UID = types.UID(fmt.Sprintf("pool-uid-%d", s.n))
	c.Generation = 1
	c.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, s.n, 0, time.UTC))
	s.pools[p.Name] = c
}

// makeInline does what ipkeeper-controller does for a NAD of an inline
// network (inlinepool.Reconciler): it makes the network's pool unless it
// exists or the network overlaps another inline network's pool, which the
// controller refuses. It reports whether it made one.
func (s *fakePoolStore) makeInline(t testing.TB, cfg *ipamconfig.Config, nad types.NamespacedName) bool {
	t.Helper()
	if cfg.Pool != "" {
		return false
	}
	pools, _ := s.List(context.Background(), true)
	for _, p := range pools {
		if p.Name == cfg.PoolName() {
			return false
		}
	}
	rangesOf := func(p *ipkeeperv1alpha1.IPPool) ([]iprange.Range, error) { return ipamconfig.PoolRanges(&p.Spec) }
	if _, refused := inlinepool.FindOverlap(cfg.Name, cfg.NetworkName, cfg.Ranges, nil, pools, rangesOf); refused != nil {
		return false
	}
	s.put(inlinepool.Build(cfg, nad))
	return true
}

// remove deletes a pool, as an admin would.
func (s *fakePoolStore) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pools, name)
}

func (s *fakePoolStore) List(context.Context, bool) ([]ipkeeperv1alpha1.IPPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ipkeeperv1alpha1.IPPool, 0, len(s.pools))
	for _, p := range s.pools {
		out = append(out, *p.DeepCopy())
	}
	return out, nil
}
