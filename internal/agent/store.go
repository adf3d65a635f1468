// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/reuse"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var (
	// ErrTaken reports that a reservation of that name already exists.
	ErrTaken = errors.New("address already reserved")
	// ErrGone reports that a reservation does not exist (any more).
	ErrGone = errors.New("reservation not found")
	// ErrChanged reports that a reservation is not the version a write was
	// made for: it changed, or another object took its name. Re-read it.
	ErrChanged = errors.New("reservation changed")
)

// Store is the narrow interface between allocation and the API server.
// Every method is a live API call; the reservation cache answers reads.
type Store interface {
	// Create creates a reservation and fills in its UID and
	// resourceVersion; ErrTaken (wrapped) when the name exists.
	Create(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error
	// Get reads a reservation live; ErrGone (wrapped) when it does not exist.
	Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error)
	// Update rewrites a reservation (only its mutable attachment fields
	// change) if it is still the version read; ErrChanged otherwise.
	Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error
	// TakenIn lists, live, the addresses reserved in a pool.
	TakenIn(ctx context.Context, pool string) (map[netip.Addr]bool, error)
	// Delete deletes the reservation with that name only if it is still
	// that object (uid) at that version (resourceVersion): ErrGone when it
	// does not exist, ErrChanged when it is another object or version.
	Delete(ctx context.Context, name string, uid types.UID, resourceVersion string) error
	// Retire sets spec.reuseAfter on the reservation with that name, with
	// Delete's preconditions and errors, and returns it as written: the
	// release of an address in a pool with a reuse cooldown.
	Retire(ctx context.Context, name string, uid types.UID, resourceVersion string, reuseAfter time.Time) (*ipkeeperv1alpha1.IPReservation, error)
}

// listPageSize bounds one page of a live list of a network's reservations.
const listPageSize = 500

// apiStore implements Store with an uncached client and counts its calls.
type apiStore struct {
	c       client.Client
	metrics *metrics
}

func (s *apiStore) Create(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	s.metrics.apiWrites.WithLabelValues("create").Inc()
	err := s.c.Create(ctx, r)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: reservation %s", ErrTaken, r.Name)
	}
	if err != nil {
		return fmt.Errorf("creating reservation %s: %w", r.Name, err)
	}
	return nil
}

func (s *apiStore) Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error) {
	s.metrics.apiReads.WithLabelValues("get").Inc()
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, r); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrGone, name)
		}
		return nil, fmt.Errorf("reading reservation %s: %w", name, err)
	}
	return r, nil
}

// TakenIn lists the reservations of the pool (by spec.pool) page by page.
func (s *apiStore) TakenIn(ctx context.Context, pool string) (map[netip.Addr]bool, error) {
	taken := map[netip.Addr]bool{}
	opts := []client.ListOption{client.MatchingFields{"spec.pool": pool}, client.Limit(listPageSize)}
	for cont := ""; ; {
		s.metrics.apiReads.WithLabelValues("list").Inc()
		var list ipkeeperv1alpha1.IPReservationList
		if err := s.c.List(ctx, &list, append(opts, client.Continue(cont))...); err != nil {
			return nil, fmt.Errorf("listing reservations of pool %q: %w", pool, err)
		}
		for _, r := range list.Items {
			if ip, err := netip.ParseAddr(r.Spec.IP); err == nil {
				taken[ip] = true
			}
		}
		if cont = list.Continue; cont == "" {
			return taken, nil
		}
	}
}

func (s *apiStore) Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	s.metrics.apiWrites.WithLabelValues("update").Inc()
	if err := s.c.Update(ctx, r); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: updating reservation %s: %w", ErrChanged, r.Name, err)
		}
		return fmt.Errorf("updating reservation %s: %w", r.Name, err)
	}
	return nil
}

func (s *apiStore) Retire(ctx context.Context, name string, uid types.UID, resourceVersion string, reuseAfter time.Time) (*ipkeeperv1alpha1.IPReservation, error) {
	patch, err := reuse.RetirePatch(uid, resourceVersion, reuseAfter)
	if err != nil {
		return nil, fmt.Errorf("retiring reservation %s: %w", name, err)
	}
	s.metrics.apiWrites.WithLabelValues("patch").Inc()
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name = name
	err = s.c.Patch(ctx, r, patch)
	switch {
	case err == nil:
		return r, nil
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: %s", ErrGone, name)
	case apierrors.IsConflict(err):
		return nil, fmt.Errorf("%w: retiring reservation %s: %w", ErrChanged, name, err)
	default:
		return nil, fmt.Errorf("retiring reservation %s: %w", name, err)
	}
}

func (s *apiStore) Delete(ctx context.Context, name string, uid types.UID, resourceVersion string) error {
	s.metrics.apiWrites.WithLabelValues("delete").Inc()
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name = name
	// Both preconditions: the UID keeps us from deleting a reservation
	// someone else made for the address after ours went; the version keeps
	// us from deleting one a new sandbox took over after we decided.
	pre := client.Preconditions{UID: &uid}
	if resourceVersion != "" {
		pre.ResourceVersion = &resourceVersion
	}
	err := s.c.Delete(ctx, r, pre)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s", ErrGone, name)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: deleting reservation %s: %w", ErrChanged, name, err)
	default:
		return fmt.Errorf("deleting reservation %s: %w", name, err)
	}
}
