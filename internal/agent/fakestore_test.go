// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/naming"
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
	return nil
}

func (s *fakeStore) TakenIn(_ context.Context, pool, _ string) (map[netip.Addr]types.UID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["list"]++
	out := map[netip.Addr]types.UID{}
	for _, o := range s.objs {
		if naming.PoolOf(o.Spec.Pool, o.Spec.Network) == pool {
			out[netip.MustParseAddr(o.Spec.IP)] = o.Spec.Owner.UID
		}
	}
	return out, nil
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
type fakeClaims struct {
	mu     sync.Mutex
	claims map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim
	rv     int
	// beforeStatus runs before a status write is applied: the place where
	// another writer (the other node of a migration) gets in first.
	beforeStatus func(c *ipamclaimsv1alpha1.IPAMClaim)
	// failAfterStatus, once, is returned after a status write was applied.
	failAfterStatus error
	// failStatus, once, is returned instead of applying a status write.
	failStatus error
	// failGet, once, is returned instead of reading a claim.
	failGet error
}

var claimsGR = schema.GroupResource{Group: "k8s.cni.cncf.io", Resource: "ipamclaims"}

func newFakeClaims(cs ...*ipamclaimsv1alpha1.IPAMClaim) *fakeClaims {
	f := &fakeClaims{claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{}}
	for _, c := range cs {
		f.put(c)
	}
	return f
}

func (f *fakeClaims) put(c *ipamclaimsv1alpha1.IPAMClaim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	c = c.DeepCopy()
	c.ResourceVersion = strconv.Itoa(f.rv)
	f.claims[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
}

// setStatusIPs writes status.ips as another writer would.
func (f *fakeClaims) setStatusIPs(ns, name string, ips ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.claims[types.NamespacedName{Namespace: ns, Name: name}]
	c.Status.IPs = ips
	f.rv++
	c.ResourceVersion = strconv.Itoa(f.rv)
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

func (f *fakeClaims) Wait(ctx context.Context, ns, name string, _ time.Duration) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	return f.Get(ctx, ns, name)
}

func (f *fakeClaims) UpdateStatus(_ context.Context, c *ipamclaimsv1alpha1.IPAMClaim) error {
	if f.beforeStatus != nil {
		hook := f.beforeStatus
		f.beforeStatus = nil // once: the other writer gets in first, then we win
		hook(c)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failStatus; err != nil {
		f.failStatus = nil
		return err
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	o, ok := f.claims[key]
	if !ok {
		return apierrors.NewNotFound(claimsGR, c.Name)
	}
	if o.ResourceVersion != c.ResourceVersion {
		return apierrors.NewConflict(claimsGR, c.Name, fmt.Errorf("the object has been modified"))
	}
	n := o.DeepCopy()
	n.Status = *c.Status.DeepCopy()
	f.rv++
	n.ResourceVersion = strconv.Itoa(f.rv)
	f.claims[key] = n
	c.ResourceVersion = n.ResourceVersion
	if err := f.failAfterStatus; err != nil {
		f.failAfterStatus = nil
		return err
	}
	return nil
}

// newTestAgent builds an agent for node-a on fake stores, with no API
// server: for unit tests of allocation and release.
func newTestAgent(t testing.TB, store Store, claims ClaimStore) *Agent {
	t.Helper()
	a := &Agent{
		opts:      Options{NodeName: "node-a", ClaimWaitTimeout: time.Second, CNIGCMinAge: time.Minute},
		log:       logr.Discard(),
		store:     store,
		claims:    claims,
		poolStore: newFakePoolStore(),
		idx:       newIndex(),
		locks:     newKeyLocks(),

		uncertain: newUncertainCreates(),
	}
	m, err := newMetrics(prometheus.NewRegistry(), a.idx.len)
	if err != nil {
		t.Fatal(err)
	}
	a.metrics = m
	return a
}

// fakePoolStore keeps IPPools in memory; Create stamps what the API server
// would (UID, generation, creation time).
type fakePoolStore struct {
	mu    sync.Mutex
	pools map[string]*ipkeeperv1alpha1.IPPool
	n     int
	// failGet, while set, is returned instead of reading a pool.
	failGet error
}

func newFakePoolStore() *fakePoolStore {
	return &fakePoolStore{pools: map[string]*ipkeeperv1alpha1.IPPool{}}
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

func (s *fakePoolStore) Create(_ context.Context, p *ipkeeperv1alpha1.IPPool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pools[p.Name]; ok {
		return fmt.Errorf("%w: IPPool %s", ErrTaken, p.Name)
	}
	s.n++
	p.UID = types.UID(fmt.Sprintf("pool-uid-%d", s.n))
	p.Generation = 1
	p.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, s.n, 0, time.UTC))
	s.pools[p.Name] = p.DeepCopy()
	return nil
}

// put stores a pool as an admin would write it (or replaces its spec),
// bumping the generation.
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
