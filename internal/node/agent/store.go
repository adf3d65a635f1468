// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The reservation error contract (package reservation), under the names
// the agent's code uses.
var (
	ErrTaken   = reservation.ErrTaken
	ErrGone    = reservation.ErrGone
	ErrChanged = reservation.ErrChanged
)

// Store is the narrow interface between allocation and the API server:
// package reservation's steps (Create, Get, Delete, Retire, with its
// errors) plus the agent's own two. Every method is a live API call; the
// reservation cache answers reads.
type Store interface {
	reservation.Store
	// Update rewrites a reservation (only its mutable attachment fields
	// change) if it is still the version read; ErrChanged otherwise.
	Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error
	// TakenIn lists, live, the addresses reserved in a pool.
	TakenIn(ctx context.Context, pool string) (map[netip.Addr]bool, error)
	// HeldIn counts, live, the reservations of a pool whose owner is of a
	// namespace (poolquota.Counter).
	HeldIn(ctx context.Context, pool, namespace string) (int, error)
	// WithMAC lists, live, the reservations of a pool labelled with a
	// MAC (macaddr.Label): what a sticky_mac network's pod may get back.
	WithMAC(ctx context.Context, pool string, mac net.HardwareAddr) ([]ipkeeperv1alpha1.IPReservation, error)
}

// listPageSize bounds one page of a live list of a network's reservations.
const listPageSize = 500

// apiStore implements Store with an uncached client (reservation's
// KubeStore for its steps) and counts its calls.
type apiStore struct {
	c client.Client
	// rest creates reservations (reservation.KubeStore.REST).
	rest    rest.Interface
	metrics *metrics
}

func (s *apiStore) kube() reservation.KubeStore {
	return reservation.KubeStore{Client: s.c, REST: s.rest}
}

func (s *apiStore) Create(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	s.metrics.apiWrites.WithLabelValues("create").Inc()
	defer s.metrics.wrote("create", time.Now())
	return s.kube().Create(ctx, r)
}

func (s *apiStore) Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error) {
	s.metrics.apiReads.WithLabelValues("get").Inc()
	return s.kube().Get(ctx, name)
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

// HeldIn counts the namespace's reservations of the pool (poolquota.Live).
func (s *apiStore) HeldIn(ctx context.Context, pool, namespace string) (int, error) {
	s.metrics.apiReads.WithLabelValues("list").Inc()
	return poolquota.Live(s.c)(ctx, pool, namespace)
}

// WithMAC lists the reservations of the pool (by spec.pool) with the MAC's
// label; few, so one page.
func (s *apiStore) WithMAC(ctx context.Context, pool string, mac net.HardwareAddr) ([]ipkeeperv1alpha1.IPReservation, error) {
	s.metrics.apiReads.WithLabelValues("list").Inc()
	var list ipkeeperv1alpha1.IPReservationList
	if err := s.c.List(ctx, &list, client.MatchingFields{"spec.pool": pool}, client.MatchingLabels{macaddr.Label: macaddr.LabelValue(mac)}); err != nil {
		return nil, fmt.Errorf("listing reservations of pool %q with MAC %s: %w", pool, mac, err)
	}
	return list.Items, nil
}

func (s *apiStore) Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	s.metrics.apiWrites.WithLabelValues("update").Inc()
	defer s.metrics.wrote("update", time.Now())
	return s.kube().Update(ctx, r)
}

func (s *apiStore) Retire(ctx context.Context, name string, uid types.UID, resourceVersion string, reuseAfter time.Time) (*ipkeeperv1alpha1.IPReservation, error) {
	s.metrics.apiWrites.WithLabelValues("patch").Inc()
	defer s.metrics.wrote("patch", time.Now())
	return s.kube().Retire(ctx, name, uid, resourceVersion, reuseAfter)
}

func (s *apiStore) Delete(ctx context.Context, name string, uid types.UID, resourceVersion string) error {
	s.metrics.apiWrites.WithLabelValues("delete").Inc()
	defer s.metrics.wrote("delete", time.Now())
	return s.kube().Delete(ctx, name, uid, resourceVersion)
}
