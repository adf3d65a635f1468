// SPDX-License-Identifier: Apache-2.0

package retry

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestBackoffIsCapped(t *testing.T) {
	rl := RateLimiter()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Name: "r"}}
	first := rl.When(item)
	if first <= 0 || first > MaxDelay {
		t.Fatalf("first retry after %s, want in (0, %s]", first, MaxDelay)
	}
	var last = first
	for range 60 { // far past 2^n * 5ms > MaxDelay
		last = rl.When(item)
	}
	if last != MaxDelay {
		t.Fatalf("after 60 failures the retry waits %s, want the cap %s", last, MaxDelay)
	}
	rl.Forget(item)
	if again := rl.When(item); again >= MaxDelay {
		t.Fatalf("after Forget the retry waits %s, want the backoff to start over", again)
	}
}
