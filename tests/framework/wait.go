// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"time"
)

// Eventually polls cond every interval until it returns true or timeout
// passes (or ctx ends); an error from cond is kept for the timeout's
// message and polling goes on. It is the only way tests wait: never a bare
// sleep.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if err != nil {
			lastErr = err
		} else if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("condition not met within %s; last error: %w", timeout, lastErr)
			}
			return fmt.Errorf("condition not met within %s", timeout)
		case <-time.After(interval):
		}
	}
}
