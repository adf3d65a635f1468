// SPDX-License-Identifier: Apache-2.0

// Package retry holds the retry policy every ipkeeper controller uses.
package retry

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MaxDelay caps the per-object backoff. controller-runtime's default grows
// to 1000 s, so after an API server outage of a few seconds (dozens of
// failed attempts) a reservation of a deleted pod could wait a quarter of
// an hour to be released. Every reconcile here is idempotent and costs a
// few requests, so retrying an object twice a minute is cheap.
const MaxDelay = 30 * time.Second

// RateLimiter is the per-object exponential backoff (5 ms to MaxDelay)
// under an overall 10 qps / 100 burst bucket, as controller-runtime's
// default but with the lower cap.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Options are the controller options every ipkeeper controller is built with.
func Options() controller.Options {
	return controller.Options{RateLimiter: RateLimiter()}
}
