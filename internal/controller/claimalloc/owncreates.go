// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"sync"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// ownCreateTTL is how long a create is remembered for its event: a watch
// delivers it within seconds; one whose event came before the create
// returned is never asked about and goes at this age.
const ownCreateTTL = 2 * time.Minute

// ownCreates remembers the reservations the allocator created, by name and
// resourceVersion, until their watch event is told apart (IsOwnCreate).
type ownCreates struct {
	mu     sync.Mutex
	byName map[string]ownCreate
}

type ownCreate struct {
	version string
	at      time.Time
}

func (o *ownCreates) add(res *ipkeeperv1alpha1.IPReservation, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byName == nil {
		o.byName = map[string]ownCreate{}
	}
	if len(o.byName) >= 1024 {
		for name, c := range o.byName {
			if now.Sub(c.at) > ownCreateTTL {
				delete(o.byName, name)
			}
		}
	}
	o.byName[res.Name] = ownCreate{version: res.ResourceVersion, at: now}
}

// take reports whether res is, to the resourceVersion, one the allocator
// created, and forgets it.
func (o *ownCreates) take(res *ipkeeperv1alpha1.IPReservation) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.byName[res.Name]
	if !ok || c.version != res.ResourceVersion || res.ResourceVersion == "" {
		return false
	}
	delete(o.byName, res.Name)
	return true
}

// IsOwnCreate reports whether res, as a watch event delivers it, is a
// reservation this allocator created, unchanged since (the event of its
// own create), once: the reconcile that created it has counted it
// already, and looking at its claim again for it is a reconcile wasted
// in a boot storm.
func (a *Allocator) IsOwnCreate(res *ipkeeperv1alpha1.IPReservation) bool {
	return a.created.take(res)
}
