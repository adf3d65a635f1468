// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// unsureTTL is how long a create whose outcome is unknown is remembered:
// longer than the holder's retries back off (two minutes at most), and
// once the cache shows a create that landed the holder's reconcile finds
// it there; one that never landed is nobody's.
const unsureTTL = 10 * time.Minute

// unsureCreates remembers, per holder and pool, the addresses whose
// create's outcome is unknown (its answer lost: a timeout, the API server
// restarting). The holder's next Assign confirms them first (it adopts
// one that landed): its search would skip them, as the engine counts them
// held until the cache shows them, and fill the claim a second time.
type unsureCreates struct {
	mu sync.Mutex
	m  map[unsureKey][]unsureCreate
}

type unsureKey struct {
	holder types.UID
	pool   string
}

type unsureCreate struct {
	ip netip.Addr
	at time.Time
}

func (u *unsureCreates) add(holder types.UID, pool string, ip netip.Addr, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[unsureKey][]unsureCreate{}
	}
	if len(u.m) >= 1024 {
		for k, cs := range u.m {
			if cs = slices.DeleteFunc(cs, func(c unsureCreate) bool { return now.Sub(c.at) > unsureTTL }); len(cs) == 0 {
				delete(u.m, k)
			}
		}
	}
	k := unsureKey{holder, pool}
	cs := slices.DeleteFunc(u.m[k], func(c unsureCreate) bool { return c.ip == ip })
	u.m[k] = append(cs, unsureCreate{ip: ip, at: now})
}

// of returns the holder's unsure addresses in the pool, the oldest first.
func (u *unsureCreates) of(holder types.UID, pool string, now time.Time) []netip.Addr {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []netip.Addr
	for _, c := range u.m[unsureKey{holder, pool}] {
		if now.Sub(c.at) <= unsureTTL {
			out = append(out, c.ip)
		}
	}
	return out
}

func (u *unsureCreates) drop(holder types.UID, pool string, ip netip.Addr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := unsureKey{holder, pool}
	if cs := slices.DeleteFunc(u.m[k], func(c unsureCreate) bool { return c.ip == ip }); len(cs) > 0 {
		u.m[k] = cs
	} else {
		delete(u.m, k)
	}
}

// confirmUnsure settles the holder's creates of the family whose outcome
// was unknown: the first that is, or now becomes, the holder's is
// returned (ok); one someone else holds is forgotten. A failure that
// leaves it unknown again fails the allocation (ok, with the error): the
// holder's retry looks again, rather than fill it with another address.
func (a *Allocator) confirmUnsure(ctx context.Context, pool *ipam.Pool, h Holder, family []iprange.Range) (*ipkeeperv1alpha1.IPReservation, bool, error) {
	for _, ip := range a.unsure.of(h.Owner.UID, pool.Name, time.Now()) {
		if _, err := pool.RangeFor(ip); err != nil || ip.Is4() != family[0].Is4() {
			continue
		}
		res, err := a.Reserve(ctx, pool, h, ip)
		var taken *reservation.TakenError
		switch {
		case err == nil:
			a.unsure.drop(h.Owner.UID, pool.Name, ip)
			return res, true, nil
		case errors.As(err, &taken) && taken.Holder != nil:
			a.unsure.drop(h.Owner.UID, pool.Name, ip)
		default:
			return nil, true, fmt.Errorf("confirming the create of %s, whose answer was lost: %w", ip, err)
		}
	}
	return nil, false, nil
}
