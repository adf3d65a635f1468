// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// holder is who an allocation is for: a pod attachment (the pod and its
// interface). IPAMClaims' addresses are ipkeeper-controller's to allocate;
// an agent only reads them (claims.go).
type holder struct {
	owner  ipkeeperv1alpha1.ReservationOwner
	ifName string
}

// key names the holder's allocation in a pool: the unit that is locked
// and whose uncertain creates are remembered.
func (h holder) key(pool string) string {
	return "pod/" + string(h.owner.UID) + "/" + h.ifName + "/" + pool
}

// owns reports whether a reservation read from the API server is this
// holder's: the same pod and interface, not released.
func (h holder) owns(r *ipkeeperv1alpha1.IPReservation) bool {
	o := r.Spec.Owner
	return o.Kind == h.owner.Kind && o.UID == h.owner.UID && !r.Spec.Released() && r.Spec.InterfaceName == h.ifName
}

// held returns the reservations the cache shows for the holder in a pool.
func (a *Agent) held(pool string, h holder) []entry {
	return a.reservations.Attachment(pool, h.owner.UID, h.ifName)
}

// reserve is the one allocation path: one address per configured range,
// reusing what the holder already holds (passing it to keep, which may
// rewrite it), else a static or free address. On failure it deletes what
// it created and returns nothing. The caller holds the holder's lock.
func (a *Agent) reserve(ctx context.Context, req *request, h holder, keep func(context.Context, entry) (entry, error)) (ips []netip.Prefix, err error) {
	held, err := a.resolveUncertain(ctx, req.pool.Name, h)
	if err != nil {
		return nil, err
	}
	var created []entry
	defer func() {
		if err != nil {
			// Never handed out: nothing to cool down.
			_ = a.discard(context.WithoutCancel(ctx), created, "rollback") // logged by discard
			ips = nil
		}
	}()
	for _, family := range req.pool.Families() {
		e, ok := heldIn(held, family[0].Is4())
		isNew := false
		if !ok {
			if e, isNew, err = a.reserveInFamily(ctx, req, family, h); err != nil {
				return nil, err
			}
		}
		if isNew {
			created = append(created, e)
		} else if keep != nil {
			if e, err = keep(ctx, e); err != nil {
				return nil, err
			}
		}
		ips = append(ips, req.pool.PrefixOf(e.IP, family))
	}
	return ips, nil
}

// heldIn returns the holder's reservation of an IP family, in a current
// range or not: an address held where the pool no longer hands out (a
// range removed, an exclude added) is kept, never released behind the
// workload's back. Should it hold two (a create applied after its outcome
// was judged unknown and gone), the oldest wins, so every ADD and CHECK
// names the same one.
func heldIn(held []entry, is4 bool) (entry, bool) {
	var best entry
	found := false
	for _, e := range held {
		if e.IP.Is4() != is4 {
			continue
		}
		if !found || e.Created.Before(best.Created) || (e.Created.Equal(best.Created) && e.Name < best.Name) {
			best, found = e, true
		}
	}
	return best, found
}

// reserveInFamily reserves the static address requested for the family,
// else, on a sticky_mac network, the address the attachment's MAC held
// (stickyTakeBack), else a free address of the first range of the family
// that has one.
func (a *Agent) reserveInFamily(ctx context.Context, req *request, family []iprange.Range, h holder) (entry, bool, error) {
	if static, ok := staticFor(req.cfg, family[0].Is4()); ok {
		if err := req.pool.Usable(static); err != nil {
			return entry{}, false, fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("static IP %s requested for network %q: %w", static, req.cfg.Name, err))
		}
		type made struct {
			e     entry
			isNew bool
		}
		// Until the create returns, this node's searches skip the address.
		got, err := ipam.Reserve(ctx, a.engine, req.pool.Name, static, func(ctx context.Context) (made, error) {
			e, isNew, err := a.createOrAdopt(ctx, req, static, h, false)
			return made{e, isNew}, err
		})
		e, isNew := got.e, got.isNew
		if errors.Is(err, ErrTaken) {
			return entry{}, false, a.describeHolder(ctx, "static IP", req, static, h.owner.Namespace)
		}
		return e, isNew, err
	}
	if e, ok, err := a.stickyTakeBack(ctx, req, family, h); ok || err != nil {
		return e, ok, err
	}
	var err error
	for _, r := range family {
		var e entry
		var isNew bool
		if e, isNew, err = a.reserveInRange(ctx, req, r, h); reasonOf(err) != reasonExhausted {
			return e, isNew, err
		}
	}
	return entry{}, false, err
}

// createOrAdopt creates the reservation of ip for the holder. When the
// name exists and the reservation is already the holder's, it is adopted
// (isNew false): a create whose response was lost. ErrTaken means someone
// else's. A create whose outcome is unknown is remembered, so the retry
// finds it even before the reservation cache shows it.
//
// inBlock says ip came from one of this node's address blocks: the
// reservation there is labelled with the node, and only this node's agent
// watches it (no other agent hands out that block's addresses).
func (a *Agent) createOrAdopt(ctx context.Context, req *request, ip netip.Addr, h holder, inBlock bool) (e entry, isNew bool, err error) {
	pool := req.pool.Name
	block := reservation.NoBlock
	if inBlock {
		block = reservation.NodeBlock
	}
	obj := reservation.New(a.params(req, ip, h, block))
	cur, adopted, err := reservation.CreateOrAdopt(ctx, a.store, obj)
	switch {
	case err == nil:
		e, _ = index.EntryOf(cur)
		a.reservations.Wrote(e)
		if adopted {
			return e, false, nil
		}
		if err := a.withinQuota(ctx, req, e); err != nil {
			return entry{}, false, err
		}
		a.metrics.allocations.Inc()
		return e, true, nil
	case errors.Is(err, ErrTaken):
		return entry{}, false, err
	default:
		a.uncertain.add(h.key(pool), obj.Name, sandboxKey{pool, req.ContainerID, req.IfName})
		return entry{}, false, fail(reasonInternal, codeTryAgainLater, err)
	}
}

// withinQuota confirms a reservation just created against the pool's
// per-namespace quota (poolquota.Confirm, a live count that includes it):
// one over it, or one the count could not confirm, is deleted at once (it
// was never handed out) and the ADD refused. An adopted reservation was
// counted when it was created.
func (a *Agent) withinQuota(ctx context.Context, req *request, e entry) error {
	limit := req.pool.Quota
	if limit == 0 {
		return nil
	}
	err := poolquota.Confirm(ctx, a.store.HeldIn, req.pool.Name, limit, e.Owner.Namespace)
	if err == nil {
		return nil
	}
	_ = a.discard(context.WithoutCancel(ctx), []entry{e}, "rollback") // logged by discard; never handed out
	if errors.Is(err, poolquota.ErrExceeded) {
		return fail(reasonQuota, codeInternal, fmt.Errorf("network %q: %w", req.cfg.Name, err))
	}
	return fail(reasonInternal, codeTryAgainLater, err)
}

// params describes the reservation of ip for a pod attachment of this
// node, made now.
func (a *Agent) params(req *request, ip netip.Addr, h holder, block reservation.Block) reservation.Params {
	return reservation.Params{
		Pool: req.pool.Name, Key: req.pool.Key, Network: req.cfg.Name, IP: ip, Owner: h.owner, Interface: req.IfName,
		ContainerID: req.ContainerID, Node: a.opts.NodeName, AttachedAt: attachedAt(req), Block: block, MAC: req.mac,
	}
}

// resolveUncertain returns what the index shows the holder holds, plus
// the reservations of earlier creates whose outcome was unknown that turn
// out to exist and be the holder's.
func (a *Agent) resolveUncertain(ctx context.Context, pool string, h holder) ([]entry, error) {
	key := h.key(pool)
	for _, name := range a.uncertain.names(key) {
		cur, err := a.store.Get(ctx, name)
		switch {
		case errors.Is(err, ErrGone):
		case err != nil:
			return nil, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("checking the outcome of an earlier create: %w", err))
		case h.owns(cur):
			if e, ok := index.EntryOf(cur); ok {
				a.reservations.Wrote(e)
			}
		}
		a.uncertain.forget(key, name)
	}
	return a.held(pool, h), nil
}

// uncertainCreates remembers, per holder, creates whose response never
// came: the API server may have applied them. The retry of the holder's
// ADD, or the DEL of the sandbox that made them, looks them up live.
type uncertainCreates struct {
	mu sync.Mutex
	m  map[string]map[string]uncertainCreate // holder key -> reservation name
}

type uncertainCreate struct {
	at      time.Time
	sandbox sandboxKey
}

// uncertainTTL bounds how long an unknown outcome is remembered; a holder
// not retried by then is gone, and the controller's GC covers the rest.
const uncertainTTL = 10 * time.Minute

func newUncertainCreates() *uncertainCreates {
	return &uncertainCreates{m: map[string]map[string]uncertainCreate{}}
}

func (u *uncertainCreates) add(key, name string, sandbox sandboxKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	for k, names := range u.m {
		for n, c := range names {
			if now.Sub(c.at) >= uncertainTTL {
				delete(names, n)
			}
		}
		if len(names) == 0 {
			delete(u.m, k)
		}
	}
	if u.m[key] == nil {
		u.m[key] = map[string]uncertainCreate{}
	}
	u.m[key][name] = uncertainCreate{at: now, sandbox: sandbox}
}

// ofSandbox returns the (holder key, reservation name) of the uncertain
// creates a sandbox's interface made on a network.
func (u *uncertainCreates) ofSandbox(sandbox sandboxKey) [][2]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out [][2]string
	for k, names := range u.m {
		for n, c := range names {
			if c.sandbox == sandbox {
				out = append(out, [2]string{k, n})
			}
		}
	}
	return out
}

func (u *uncertainCreates) names(key string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]string, 0, len(u.m[key]))
	for n := range u.m[key] {
		out = append(out, n)
	}
	return out
}

func (u *uncertainCreates) forget(key, name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if names := u.m[key]; names != nil {
		delete(names, name)
		if len(names) == 0 {
			delete(u.m, key)
		}
	}
}

// describeHolder explains who holds an address that was asked for by
// name: what says how ("static IP", or "address" for a claim's). The
// holder is named only when it is in the requester's namespace: another
// tenant's objects are none of the requester's business.
//
// An address released by its holder and cooling down (its pool's
// reuseCooldown) is a passing state: "try again later" says when.
func (a *Agent) describeHolder(ctx context.Context, what string, req *request, ip netip.Addr, namespace string) error {
	name := naming.Reservation(req.pool.Key, ip)
	r, err := a.store.Get(ctx, name)
	if err != nil {
		r = nil // described as another namespace's: nothing to tell
	}
	msg := fmt.Sprintf("%s %s on network %q %s", what, ip, req.cfg.Name, reservation.DescribeHolder(name, r, namespace))
	if r != nil && r.Spec.Released() {
		return fail(reasonConflict, codeTryAgainLater, errors.New(msg+"; retry after that"))
	}
	return fail(reasonConflict, codeInternal, errors.New(msg))
}

func staticFor(cfg *ipamconfig.Config, is4 bool) (netip.Addr, bool) {
	for _, p := range cfg.StaticIPs {
		if p.Addr().Is4() == is4 {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}
