// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// lockAndSend takes key's lock and sends its release on acquired, which
// must be buffered so that a holder never parks here. blockedIn looks for
// this function's name on the stack of a goroutine parked in lock.
func lockAndSend(k *keyLocks, key string, acquired chan<- func()) {
	acquired <- k.lock(key)
}

const lockAndSendFrame = "agent.lockAndSend("

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
			unlockFirst := k.lock(tt.first)

			acquired := make(chan func(), 1)
			go lockAndSend(k, tt.second, acquired)
			stop := make(chan struct{})
			defer close(stop)
			// Whichever happens first decides: the second locker returns,
			// or the runtime shows it parked. Neither depends on timing.
			var unlockSecond func()
			select {
			case unlockSecond = <-acquired:
				if tt.wantBlocked {
					t.Fatalf("lock(%q) returned while lock(%q) was held", tt.second, tt.first)
				}
			case <-blockedIn(lockAndSendFrame, stop):
				if !tt.wantBlocked {
					t.Fatalf("lock(%q) blocked while only lock(%q) was held", tt.second, tt.first)
				}
			}
			if !k.held(tt.first) || !k.held(tt.second) {
				t.Errorf("held(%q), held(%q) = %v, %v with both requested, want true, true", tt.first, tt.second, k.held(tt.first), k.held(tt.second))
			}

			unlockFirst()
			if tt.wantBlocked {
				// Released, the waiter must get the lock; a lost wake-up
				// hangs here until the test binary's timeout.
				unlockSecond = <-acquired
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
