// SPDX-License-Identifier: Apache-2.0

// Package reuse is the one rule for letting a reservation's address go:
// delete the reservation at once, or, in a pool with spec.reuseCooldown,
// retire it (set spec.reuseAfter) so the address is handed to nobody until
// the cooldown is over, and delete it only then. The agent (DEL, CNI GC,
// claim paths) and the controller (the reservation garbage collector) both
// decide here; the release is recorded on the reservation itself, so the
// delay holds across restarts of every component.
package reuse
