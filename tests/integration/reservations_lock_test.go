// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestSecondReservationOfAnAddressIsRefused is the property the whole
// allocator rests on: the reservation's name is derived from (network, IP),
// so the API server itself refuses a second holder with AlreadyExists.
func TestSecondReservationOfAnAddressIsRefused(t *testing.T) {
	ctx := context.Background()
	first := newReservation("lock-test", "10.40.0.1")
	if err := cp.Client.Create(ctx, first); err != nil {
		t.Fatalf("first reservation: %v", err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, first) })

	second := newReservation("lock-test", "10.40.0.1")
	second.Spec.Owner.Name, second.Spec.Owner.UID = "pod-b", "0b8e7c1a-1111-4c1e-9f00-000000000002"
	if err := cp.Client.Create(ctx, second); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second reservation of the same address: want AlreadyExists, got %v", err)
	}

	// The same address on another network is a different reservation.
	other := newReservation("lock-test-other", "10.40.0.1")
	if err := cp.Client.Create(ctx, other); err != nil {
		t.Fatalf("same IP on another network: %v", err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, other) })
}

// TestConcurrentReservationsHaveOneWinner races writers for one address.
func TestConcurrentReservationsHaveOneWinner(t *testing.T) {
	ctx := context.Background()
	const writers = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      int
		refused  int
		failures []error
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newReservation("race-test", "fd00:40::1")
			r.Spec.Owner.Name = fmt.Sprintf("pod-%d", i)
			r.Spec.Owner.UID = types.UID("uid-" + r.Spec.Owner.Name)
			err := cp.Client.Create(ctx, r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case apierrors.IsAlreadyExists(err):
				refused++
			default:
				failures = append(failures, err)
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, newReservation("race-test", "fd00:40::1")) })
	if len(failures) > 0 {
		t.Fatalf("unexpected errors: %v", failures)
	}
	if won != 1 || refused != writers-1 {
		t.Fatalf("won=%d refused=%d, want exactly one winner and %d AlreadyExists", won, refused, writers-1)
	}
}

// TestReservationNameIsItsLockKeyAndAddress: the API server refuses a
// reservation whose name is not the one its pool and address give
// (naming.Reservation(lock key, ip)): with a free choice of name a second
// holder of an address would be a second object, and the lock the name
// is would hold nothing. Every form ipkeeper writes is taken.
func TestReservationNameIsItsLockKeyAndAddress(t *testing.T) {
	ctx := context.Background()
	named := func(name, network, pool, ip string) *ipkeeperv1alpha1.IPReservation {
		r := newReservation(network, ip)
		r.Name, r.Spec.Pool = name, pool
		return r
	}
	for _, tt := range []struct {
		name string
		res  *ipkeeperv1alpha1.IPReservation
		ok   bool
	}{
		{"an inline network's", newReservation("lockname-a", "10.201.0.13"), true},
		{"an IPv6 address's", newReservation("lockname-a", "fd00:201::13"), true},
		{"a named pool's, of another network", named(naming.Reservation("lockname-pool", netip.MustParseAddr("10.201.0.13")), "lockname-b", "lockname-pool", "10.201.0.13"), true},
		{"a network name that is no DNS label", newReservation("Lockname_C", "10.201.0.13"), true},
		{"a pool name that is no DNS label", named(naming.Reservation("lockname.d", netip.MustParseAddr("10.201.0.13")), "lockname-d", "lockname.d", "10.201.0.13"), true},
		// The example: red.10-201-0-13 holding 10.201.0.14 next to red.10-201-0-14.
		{"another address's name", named("lockname-e.10-201-0-13", "lockname-e", "lockname-e", "10.201.0.14"), false},
		{"another IPv6 address's name", named(naming.Reservation("lockname-e", netip.MustParseAddr("fd00:201::13")), "lockname-e", "lockname-e", "fd00:201::14"), false},
		{"a shortened IPv6 label", named("lockname-e.fd00--13", "lockname-e", "lockname-e", "fd00::13"), false},
		{"the network's name for a named pool's address", named(naming.Reservation("lockname-f", netip.MustParseAddr("10.201.0.13")), "lockname-f", "lockname-pool", "10.201.0.13"), false},
		{"another pool's name", named(naming.Reservation("lockname-pool", netip.MustParseAddr("10.201.0.13")), "lockname-g", "lockname-g", "10.201.0.13"), false},
		{"no address label", named("lockname-h", "lockname-h", "lockname-h", "10.201.0.13"), false},
		{"an unhashed name for a pool name that is no DNS label", named("lockname.d.10-201-0-13", "lockname-d", "lockname.d", "10.201.0.13"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := cp.Client.Create(ctx, tt.res)
			if err == nil {
				t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), tt.res) })
			}
			switch {
			case tt.ok && err != nil:
				t.Fatalf("%s (pool %s, ip %s) refused: %v", tt.res.Name, tt.res.Spec.Pool, tt.res.Spec.IP, err)
			case !tt.ok && !apierrors.IsInvalid(err):
				t.Fatalf("%s (pool %s, ip %s): want Invalid, got %v", tt.res.Name, tt.res.Spec.Pool, tt.res.Spec.IP, err)
			case !tt.ok && !strings.Contains(err.Error(), "metadata.name must"):
				t.Fatalf("%s: the refusal does not say what the name must be: %v", tt.res.Name, err)
			}
		})
	}
}
