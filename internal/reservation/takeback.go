// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"errors"
	"fmt"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// maxTakeBackRaces bounds the re-reads of a kept reservation that keeps
// changing while it is taken back.
const maxTakeBackRaces = 3

// maxLostAnswers bounds the retries of a take-back's delete or create
// whose outcome is unknown (its answer lost: a connection cut, a
// timeout), and lostAnswerPause paces them.
const (
	maxLostAnswers  = 3
	lostAnswerPause = 200 * time.Millisecond
)

// TakeBack gives the holder p names the address of old, a reservation
// kept back for it (kept says whether a reservation read meanwhile still
// is): an IPAMClaim made anew gets what its name held (KeptFor), a pod
// of a sticky_mac network what its MAC held (KeptForMAC). A
// reservation's owner never changes (the API refuses it), so this is a
// delete at the version seen and a create: if another writer creates the
// address in between, the holder just does not get it back (a
// *TakenError); no address is ever held twice. Between the two the
// address is free, so a delete or a create whose answer was lost is not
// left at that: the reservation is read again (a delete that landed is
// done) and the create retried (one that landed is adopted), a few times.
func TakeBack(ctx context.Context, s Store, old *ipkeeperv1alpha1.IPReservation, p Params, kept func(*ipkeeperv1alpha1.IPReservation) bool) (*ipkeeperv1alpha1.IPReservation, error) {
	failed := func(err error) error {
		return fmt.Errorf("taking back %s for %s %s/%s: %w", old.Spec.IP, p.Owner.Kind, p.Owner.Namespace, p.Owner.Name, err)
	}
	for races, lost := 0, 0; ; {
		err := Discard(ctx, s, old.Name, old.UID, old.ResourceVersion)
		if err == nil || errors.Is(err, ErrGone) {
			break
		}
		// Refused because it changed since it was read (most often the
		// garbage collector released it meanwhile: the holder made anew
		// races the old one's release), or its outcome unknown: judged
		// again on what is there now.
		cur, gerr := s.Get(ctx, old.Name)
		switch {
		case errors.Is(gerr, ErrGone):
			// Deleted: by this delete, whose answer was lost, or by another.
		case gerr != nil:
			return nil, failed(errors.Join(err, gerr))
		case !errors.Is(err, ErrChanged) && cur.UID == old.UID && cur.ResourceVersion == old.ResourceVersion:
			// Unchanged: the delete did not land.
			if lost++; lost > maxLostAnswers || !pause(ctx) {
				return nil, failed(err)
			}
			continue
		case races < maxTakeBackRaces && kept(cur):
			races++
			old = cur
			continue
		default:
			return nil, &TakenError{Name: cur.Name, Holder: cur}
		}
		break
	}
	for lost := 0; ; lost++ {
		res, _, err := CreateOrAdopt(ctx, s, New(p))
		if err == nil {
			return res, nil
		}
		if errors.Is(err, ErrTaken) || lost >= maxLostAnswers || !pause(ctx) {
			return nil, err
		}
	}
}

// pause waits lostAnswerPause; false when ctx ends first.
func pause(ctx context.Context) bool {
	t := time.NewTimer(lostAnswerPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
