// SPDX-License-Identifier: Apache-2.0

// Package claimstatus holds the IPAMClaim conditions ipkeeper sets that
// more than one component writes: one definition of their type, reasons
// and messages for the agent (at ADD) and the controller (when a pool
// changes under a running VM).
package claimstatus

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionInPool says whether the claim's addresses are ones their pool
// still hands out. False once a range was removed or an address excluded
// under it; the claim keeps the address all the same.
const ConditionInPool = "AddressesInPool"

// Reasons of ConditionInPool.
const (
	ReasonInPool    = "InPool"
	ReasonOutOfPool = "OutOfPool"
)

// InPool returns the ConditionInPool of a claim whose addresses in pools
// are outside them as listed (each "IP (why)"); none listed means True.
func InPool(pools []string, outside []string, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionInPool, Status: metav1.ConditionTrue, Reason: ReasonInPool,
		Message: fmt.Sprintf("every address is one IPPool %s hands out", strings.Join(quote(pools), ", ")), ObservedGeneration: generation}
	if len(outside) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonOutOfPool
		c.Message = fmt.Sprintf("IPPool %s no longer hands out %s; the claim keeps the address while it exists, and it is not handed to anyone else",
			strings.Join(quote(pools), ", "), strings.Join(outside, ", "))
	}
	return c
}

// Outside renders an address the pool no longer hands out, and why, for
// InPool's list; agent and controller alike, so they agree on the message.
func Outside(ip netip.Addr, why error) string {
	return fmt.Sprintf("%s (%v)", ip, why)
}

func quote(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
