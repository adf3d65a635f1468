// SPDX-License-Identifier: Apache-2.0

package agent

import "sync"

// keyLocks serialises requests for one attachment (a retried ADD racing the
// first one) without a global lock.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock

	// waiting, when set, is called with a key whose lock another request
	// holds, just before lock waits for it. Tests set it to see a waiter
	// without timing; it is nil in production.
	waiting func(key string)
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func newKeyLocks() *keyLocks { return &keyLocks{locks: map[string]*keyLock{}} }

// lock acquires key's lock and returns its release.
func (k *keyLocks) lock(key string) func() {
	k.mu.Lock()
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	if !l.mu.TryLock() {
		if k.waiting != nil {
			k.waiting(key)
		}
		l.mu.Lock()
	}
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// held reports whether a request for key is in flight.
func (k *keyLocks) held(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.locks[key] != nil
}
