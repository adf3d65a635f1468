// SPDX-License-Identifier: Apache-2.0

package agent

import "sync"

// keyLocks serialises requests for one attachment (a retried ADD racing the
// first one) without a global lock.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
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
	l.mu.Lock()
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
