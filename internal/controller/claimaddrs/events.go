// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"slices"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
)

// The events a claim's fill causes itself are not looked at again: in a
// boot storm each was a reconcile per claim (two live reads of its VM and
// VMI, a fill attempted from a cache still behind, a conflict), and they
// made the controller's queue, which launchers wait on, three times longer.
// They are the echo of its own status write, of its own reservations'
// creates (claimalloc.Allocator.IsOwnCreate), and the writes of the
// claim's other parts by their writers (the MAC label, the conditions
// claimstatus.Parts gives to other packages), which the fill never reads.

// ownWriteTTL is how long a status write is remembered: its echo comes
// back within seconds.
const ownWriteTTL = 2 * time.Minute

// ownWrites remembers the last status write of each claim until its echo
// comes back, so that a reconcile reading the cache before then works on
// what was written (fresher), and the echo itself is not reconciled (echo).
// Writes that follow before an echo form a chain (the fill, then the
// owner pod a launcher's event records): a cache showing any version of
// it is behind the last.
type ownWrites struct {
	mu    sync.Mutex
	claim map[types.NamespacedName]ownWrite
}

type ownWrite struct {
	// before are the resourceVersions the chain of writes replaced and
	// wrote before its last: each older than written, what the API server
	// returned for the last.
	before  []string
	written *ipamclaimsv1alpha1.IPAMClaim
	at      time.Time
}

// wrote records that before was replaced by written (the API server's
// answer to the status write). Every version the unechoed writes of the
// same claim replaced or wrote stays behind it: a write succeeds only on
// the latest version, so all were older.
func (w *ownWrites) wrote(before, written *ipamclaimsv1alpha1.IPAMClaim) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claim == nil {
		w.claim = map[types.NamespacedName]ownWrite{}
	}
	if len(w.claim) >= 1024 {
		for key, o := range w.claim {
			if now.Sub(o.at) > ownWriteTTL {
				delete(w.claim, key)
			}
		}
	}
	key := types.NamespacedName{Namespace: written.Namespace, Name: written.Name}
	behind := []string{before.ResourceVersion}
	if o, ok := w.claim[key]; ok && o.written.UID == written.UID && now.Sub(o.at) <= ownWriteTTL {
		behind = append(append(behind, o.before...), o.written.ResourceVersion)
	}
	w.claim[key] = ownWrite{before: behind, written: written.DeepCopy(), at: now}
}

// fresher returns what was last written for claim when claim is, to the
// resourceVersion, an object the chain of writes replaced (the cache has
// not shown the last write yet); claim itself otherwise.
func (w *ownWrites) fresher(claim *ipamclaimsv1alpha1.IPAMClaim) *ipamclaimsv1alpha1.IPAMClaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.claim[types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}]
	if !ok || o.written.UID != claim.UID || !slices.Contains(o.before, claim.ResourceVersion) {
		return claim
	}
	return o.written.DeepCopy()
}

// echo reports whether claim is the object last written, to the
// resourceVersion, and forgets the write: the cache shows it now.
func (w *ownWrites) echo(claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	o, ok := w.claim[key]
	if !ok || o.written.UID != claim.UID || o.written.ResourceVersion != claim.ResourceVersion {
		return false
	}
	delete(w.claim, key)
	return true
}

// forget drops what is remembered of a claim gone.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.claim, key)
}

// claimUpdates lets through every claim event but the updates the fill
// has nothing to do about: the echo of its own status write, and updates
// that change only what others write (fillReads).
func claimUpdates(w *ownWrites) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*ipamclaimsv1alpha1.IPAMClaim)
		cur, ok2 := e.ObjectNew.(*ipamclaimsv1alpha1.IPAMClaim)
		if !ok1 || !ok2 {
			return true
		}
		if w.echo(cur) {
			return false
		}
		return !equality.Semantic.DeepEqual(fillReads(old), fillReads(cur))
	}}
}

// othersConditions are the condition types of a claim's status other
// packages write (claimstatus.Parts).
var othersConditions = func() []string {
	var out []string
	for part, writers := range claimstatus.Parts {
		if part != claimstatus.PartIPs && part != claimstatus.PartOwnerPod && !slices.Contains(writers, "internal/controller/claimaddrs") {
			out = append(out, part)
		}
	}
	return out
}()

// fillReads is the claim without what the fill neither reads nor writes:
// its resourceVersion and managedFields, its MAC label, and the
// conditions other packages write.
func fillReads(claim *ipamclaimsv1alpha1.IPAMClaim) *ipamclaimsv1alpha1.IPAMClaim {
	c := claim.DeepCopy()
	c.ResourceVersion = ""
	c.ManagedFields = nil
	if _, ok := c.Labels[macaddr.Label]; ok {
		delete(c.Labels, macaddr.Label)
		if len(c.Labels) == 0 {
			c.Labels = nil
		}
	}
	c.Status.Conditions = slices.DeleteFunc(c.Status.Conditions, func(cond metav1.Condition) bool {
		return slices.Contains(othersConditions, cond.Type)
	})
	if len(c.Status.Conditions) == 0 {
		c.Status.Conditions = nil
	}
	return c
}
