// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// lockWait bounds every wait of the lock tests: an outcome that has not
// come by then never will (a lost wake-up, a waiter that never waits).
const lockWait = 10 * time.Second

// waitsFor makes k report each key a lock call finds held on the returned
// channel (keyLocks.waiting), before that call waits.
func waitsFor(k *keyLocks) <-chan string {
	waiting := make(chan string, 8)
	k.waiting = func(key string) { waiting <- key }
	return waiting
}

func TestKeyLocksSerialise(t *testing.T) {
	tests := []struct {
		name          string
		first, second string
		wantBlocked   bool
	}{
		{"same attachment", "pod-1/net1", "pod-1/net1", true},
		{"other interface of the pod", "pod-1/net1", "pod-1/net2", false},
		{"other pod", "pod-1/net1", "pod-2/net1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyLocks()
			waiting := waitsFor(k)
			unlockFirst := k.lock(tt.first)

			acquired := make(chan func(), 1)
			go func() { acquired <- k.lock(tt.second) }()
			// Whichever happens first decides: the second lock returns, or
			// it finds the key held and says it waits. Neither depends on
			// timing; the deadline only ends a hang.
			var unlockSecond func()
			select {
			case unlockSecond = <-acquired:
				if tt.wantBlocked {
					t.Fatalf("lock(%q) returned while lock(%q) was held", tt.second, tt.first)
				}
			case key := <-waiting:
				if !tt.wantBlocked {
					t.Fatalf("lock(%q) waited (for %q) while only lock(%q) was held", tt.second, key, tt.first)
				}
				if key != tt.second {
					t.Fatalf("lock(%q) reported waiting for %q", tt.second, key)
				}
			case <-time.After(lockWait):
				t.Fatalf("lock(%q) neither returned nor waited within %s", tt.second, lockWait)
			}
			if !k.held(tt.first) || !k.held(tt.second) {
				t.Errorf("held(%q), held(%q) = %v, %v with both requested, want true, true", tt.first, tt.second, k.held(tt.first), k.held(tt.second))
			}

			if tt.wantBlocked {
				// The first holder still has it: the waiter cannot be through.
				select {
				case <-acquired:
					t.Fatalf("lock(%q) returned after waiting, while lock(%q) was still held", tt.second, tt.first)
				default:
				}
			}
			unlockFirst()
			if tt.wantBlocked {
				// Released, the waiter must get the lock.
				select {
				case unlockSecond = <-acquired:
				case <-time.After(lockWait):
					t.Fatalf("lock(%q) still waiting %s after lock(%q) was released (a lost wake-up)", tt.second, lockWait, tt.first)
				}
			}
			if !k.held(tt.second) {
				t.Errorf("held(%q) = false while the second holder has it", tt.second)
			}
			unlockSecond()
			if k.held(tt.first) || k.held(tt.second) {
				t.Errorf("held after both released: %q %v, %q %v", tt.first, k.held(tt.first), tt.second, k.held(tt.second))
			}
			if n := len(k.locks); n != 0 {
				t.Errorf("%d keys left in the lock map after every holder released", n)
			}
		})
	}
}

// A runtime retrying a slow ADD sends a second ADD of the same attachment
// while the first is still writing its reservation: the second waits for
// the attachment's lock and then finds the first's address, instead of
// reserving another. ADD of another interface of the pod does not wait.
func TestConcurrentAddsOfOneAttachmentAreSerialised(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()
	pod := testPod("web", "pod-uid-1")
	waiting := waitsFor(a.locks)

	// The first create parks until released, with the attachment's lock held.
	var parked atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	store.beforeCreate = func(*ipkeeperv1alpha1.IPReservation) error {
		if parked.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	}
	type result struct {
		ips []netip.Prefix
		err error
	}
	add := func(ifName string) <-chan result {
		req := testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-1", pod)
		req.IfName = ifName
		done := make(chan result, 1)
		go func() {
			ips, err := a.allocateForPod(ctx, req, pod)
			done <- result{ips, err}
		}()
		return done
	}
	await := func(what string, done <-chan result) result {
		t.Helper()
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("%s: %v", what, r.err)
			}
			return r
		case <-time.After(lockWait):
			t.Fatalf("%s did not return within %s", what, lockWait)
			return result{}
		}
	}

	first := add("net1")
	select {
	case <-entered:
	case r := <-first:
		t.Fatalf("first ADD returned (%v, %v) without creating a reservation", r.ips, r.err)
	case <-time.After(lockWait):
		t.Fatalf("first ADD did not reach its create within %s", lockWait)
	}
	retry := add("net1")
	select {
	case <-waiting:
	case r := <-retry:
		t.Fatalf("the retried ADD returned (%v, %v) while the first ADD of the attachment was in flight", r.ips, r.err)
	case <-time.After(lockWait):
		t.Fatalf("the retried ADD neither waited for the attachment's lock nor returned within %s", lockWait)
	}
	other := await("ADD of net2 while net1's ADD is in flight", add("net2"))

	close(release)
	r1, r2 := await("first ADD", first), await("retried ADD", retry)
	if !slices.Equal(r1.ips, r2.ips) {
		t.Errorf("the retried ADD got %v, the first %v: one attachment, two answers", r2.ips, r1.ips)
	}
	if slices.Equal(other.ips, r1.ips) {
		t.Errorf("net2 got net1's addresses %v", r1.ips)
	}
	if got := reservationsOwnedBy(store, pod.UID); len(got) != 2 {
		t.Errorf("%d reservations of the pod, want 2 (net1, net2): %v", len(got), got)
	}
	select {
	case key := <-waiting:
		t.Errorf("a lock call waited for %q: only the retried ADD should have", key)
	default:
	}
}

func TestKeyLocksHeld(t *testing.T) {
	tests := []struct {
		name  string
		steps func(k *keyLocks) (release func())
		held  map[string]bool
	}{
		{"never locked", func(*keyLocks) func() { return func() {} }, map[string]bool{"a": false}},
		{"locked", func(k *keyLocks) func() { return k.lock("a") }, map[string]bool{"a": true, "b": false, "": false}},
		{"locked and released", func(k *keyLocks) func() { k.lock("a")(); return func() {} }, map[string]bool{"a": false}},
		{"relocked after release", func(k *keyLocks) func() { k.lock("a")(); return k.lock("a") }, map[string]bool{"a": true}},
		{"two keys, one released", func(k *keyLocks) func() {
			u := k.lock("a")
			k.lock("b")()
			return u
		}, map[string]bool{"a": true, "b": false}},
		{"empty key", func(k *keyLocks) func() { return k.lock("") }, map[string]bool{"": true, "a": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyLocks()
			release := tt.steps(k)
			for key, want := range tt.held {
				if got := k.held(key); got != want {
					t.Errorf("held(%q) = %v, want %v", key, got, want)
				}
			}
			release()
			for key := range tt.held {
				if k.held(key) {
					t.Errorf("held(%q) = true after release", key)
				}
			}
			if n := len(k.locks); n != 0 {
				t.Errorf("%d keys left in the lock map after release", n)
			}
		})
	}
}

// Many goroutines on a few keys: at most one holder per key at any time,
// and under -race the plain counters show any access the lock does not
// order. Afterwards the map is empty.
func TestKeyLocksMutualExclusion(t *testing.T) {
	const (
		goroutines = 8
		rounds     = 300
	)
	keys := []string{"pod-a/net1", "pod-b/net1", "pod-c/net1"}
	var (
		k        = newKeyLocks()
		counters = make([]int, len(keys)) // guarded only by the key locks
		inside   = make([]atomic.Int32, len(keys))
		wg       sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				ki := (g + i) % len(keys)
				unlock := k.lock(keys[ki])
				if n := inside[ki].Add(1); n != 1 {
					t.Errorf("%d holders of %q at once", n, keys[ki])
				}
				counters[ki]++
				runtime.Gosched()
				inside[ki].Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, c := range counters {
		total += c
	}
	if total != goroutines*rounds {
		t.Errorf("%d increments counted, want %d", total, goroutines*rounds)
	}
	if n := len(k.locks); n != 0 {
		t.Errorf("%d keys left in the lock map: %v", n, fmt.Sprint(k.locks))
	}
}
