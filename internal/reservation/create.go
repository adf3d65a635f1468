// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"errors"
	"fmt"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TakenError is ErrTaken with the reservation that holds the address, as
// read live after the create failed. DescribeHolder says whose it is in
// words fit for the requester.
type TakenError struct {
	// Name is the reservation's.
	Name string
	// Holder is the reservation as read; nil when it could not be read
	// (Err says why: gone meanwhile, or the API server failing).
	Holder *ipkeeperv1alpha1.IPReservation
	Err    error
}

func (e *TakenError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("%s: reservation %s; reading it: %v", ErrTaken, e.Name, e.Err)
	}
	return fmt.Sprintf("%s: reservation %s", ErrTaken, e.Name)
}

// Is makes a TakenError an ErrTaken.
func (e *TakenError) Is(target error) bool { return target == ErrTaken }

// Unwrap returns the error of reading the holder, if any.
func (e *TakenError) Unwrap() error { return e.Err }

// CreateOrAdopt creates r (built by New). When its name exists and the
// reservation there is already r's holder's (HeldBy r's owner and
// interface: a create whose answer was lost), that one is returned
// instead, adopted. Otherwise the error is a *TakenError (an ErrTaken)
// with the holder, or, when it could not be read, the read's error.
// Other errors are the create's;
// its outcome is then unknown, and the caller's retry must look.
func CreateOrAdopt(ctx context.Context, s Store, r *ipkeeperv1alpha1.IPReservation) (res *ipkeeperv1alpha1.IPReservation, adopted bool, err error) {
	err = s.Create(ctx, r)
	if err == nil {
		return r, false, nil
	}
	if !errors.Is(err, ErrTaken) {
		return nil, false, err
	}
	cur, gerr := s.Get(ctx, r.Name)
	switch {
	case gerr != nil:
		return nil, false, &TakenError{Name: r.Name, Err: gerr}
	case HeldBy(cur, r.Spec.Owner, r.Spec.InterfaceName):
		return cur, true, nil
	default:
		return nil, false, &TakenError{Name: r.Name, Holder: cur}
	}
}

// MaxCollisions bounds how many candidates in a row one allocation finds
// taken at create time before giving up: each means the caller's view of
// what is free (a cache, an index) had not shown that holder yet, so
// reaching it means that view is far behind, and the caller retries later
// rather than spin.
const MaxCollisions = 64

// ErrCollisions reports that MaxCollisions candidates in a row were taken.
var ErrCollisions = fmt.Errorf("%d candidate addresses in a row were taken at create time", MaxCollisions)

// Hunt is the one create-as-lock loop: attempt picks a candidate and
// creates (or adopts) its reservation; a candidate taken meanwhile
// (attempt's error wraps ErrTaken, which the attempt may count) costs one
// of MaxCollisions tries, and the next attempt picks another. Any other
// outcome ends the hunt as it is; ErrCollisions when the tries run out.
func Hunt[T any](attempt func() (T, error)) (T, error) {
	for range MaxCollisions {
		got, err := attempt()
		if !errors.Is(err, ErrTaken) {
			return got, err
		}
	}
	var zero T
	return zero, ErrCollisions
}
