package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// ErrTaken reports that a reservation of that name already exists.
var ErrTaken = errors.New("address already reserved")

// Store is the narrow interface between allocation and the API server.
// Every method is a live API call; the informer-fed index answers reads.
type Store interface {
	// Create creates a reservation; ErrTaken (wrapped) when the name exists.
	Create(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error
	// Get reads a reservation live.
	Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error)
	// Update rewrites a reservation (only its mutable attachment fields change).
	Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error
	// TakenIn lists, live, the addresses reserved on a network.
	TakenIn(ctx context.Context, network string) (map[netip.Addr]bool, error)
	// Delete deletes the reservation with that name and UID; a reservation
	// already gone, or replaced by another of the same name, is not an error.
	Delete(ctx context.Context, name string, uid types.UID) error
}

// apiStore implements Store with an uncached client and counts its writes.
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
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, r); err != nil {
		return nil, fmt.Errorf("reading reservation %s: %w", name, err)
	}
	return r, nil
}

func (s *apiStore) TakenIn(ctx context.Context, network string) (map[netip.Addr]bool, error) {
	var list ipkeeperv1alpha1.IPReservationList
	if err := s.c.List(ctx, &list, client.MatchingFields{"spec.network": network}); err != nil {
		return nil, fmt.Errorf("listing reservations of network %q: %w", network, err)
	}
	taken := make(map[netip.Addr]bool, len(list.Items))
	for _, r := range list.Items {
		if ip, err := netip.ParseAddr(r.Spec.IP); err == nil {
			taken[ip] = true
		}
	}
	return taken, nil
}

func (s *apiStore) Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	s.metrics.apiWrites.WithLabelValues("update").Inc()
	if err := s.c.Update(ctx, r); err != nil {
		return fmt.Errorf("updating reservation %s: %w", r.Name, err)
	}
	return nil
}

func (s *apiStore) Delete(ctx context.Context, name string, uid types.UID) error {
	s.metrics.apiWrites.WithLabelValues("delete").Inc()
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name = name
	// The UID precondition keeps us from deleting a reservation someone
	// else created for the same address after ours was released.
	err := s.c.Delete(ctx, r, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting reservation %s: %w", name, err)
	}
	return nil
}
