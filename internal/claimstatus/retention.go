// SPDX-License-Identifier: Apache-2.0

package claimstatus

import (
	"fmt"
	"time"
)

// RetentionAnnotation keeps a VM's addresses for a while after their
// claim is released (the VM deleted, the network unplugged): set on a
// VirtualMachine (or a standalone VMI) to a duration such as "2h", it is
// recorded on each claim ipkeeper-controller makes for it, capped at the
// controller's --max-address-retention. When the claim is released, its
// reservations are retired for that long (or for their pool's
// reuseCooldown, if longer) instead of being deleted, and only a claim of
// the same namespace and name (the VM made again, restored from a
// snapshot or a backup, the network plugged back) gets those addresses
// meanwhile.
const RetentionAnnotation = "ipkeeper.io/retain-addresses-for"

// ParseRetention reads a RetentionAnnotation value: a Go duration
// ("90m", "2h", "24h"), 0 or more.
func ParseRetention(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("annotation %s %.64q is not a duration such as \"2h\" or \"90m\"", RetentionAnnotation, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("annotation %s %.64q is negative", RetentionAnnotation, v)
	}
	return d, nil
}

// CappedRetention is a claim's retention (RetentionAnnotation) as the
// controller applies it: at most max, and none when the annotation is
// absent or unreadable (the claim's annotation may have been edited by
// hand since the controller recorded it).
func CappedRetention(annotations map[string]string, max time.Duration) time.Duration {
	v, ok := annotations[RetentionAnnotation]
	if !ok {
		return 0
	}
	d, err := ParseRetention(v)
	if err != nil {
		return 0
	}
	return min(d, max)
}
