// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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
