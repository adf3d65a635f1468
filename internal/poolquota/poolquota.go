// SPDX-License-Identifier: Apache-2.0

// Package poolquota is the one rule of an IPPool's per-namespace quota
// (spec.maxAddressesPerNamespace): how many of the pool's addresses the
// workloads of one namespace may hold together, released addresses that
// cool down or are retained for a deleted VM included. Every writer that
// hands out a new address in a pool calls it: the agent for pods,
// ipkeeper-controller for IPAMClaims and Cluster API IPAddressClaims.
//
// No writer serialises with another (agents of different nodes, the
// controller), so a count made before a create cannot keep two writers
// from each taking the namespace's last address. The rule is therefore
// checked after the create, against a live count that includes it
// (Confirm): a writer whose new reservation finds the namespace over its
// quota deletes it (it was never handed out) and refuses. Of two racing
// creates the later-created one always sees the other, so no address
// beyond the quota is ever handed to a workload; at worst both refuse, and
// the workload's retry gets it. A cheap count first (Check, from the
// controller's cache) spares the create of an allocation that would be
// refused anyway.
package poolquota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// OwnerNamespaceField is the IPReservation field selector of the owner's
// namespace (a selectable field of the CRD).
const OwnerNamespaceField = "spec.owner.namespace"

// ErrExceeded is wrapped by every refusal of the quota (*ExceededError).
var ErrExceeded = errors.New("namespace quota of the pool reached")

// ExceededError refuses an address to a namespace that holds its quota.
type ExceededError struct {
	Pool, Namespace string
	// Limit is the pool's spec.maxAddressesPerNamespace; Held what the
	// namespace holds besides the address refused.
	Limit, Held int
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("namespace %q holds %d addresses of IPPool %q, whose spec.maxAddressesPerNamespace is %d: "+
		"a released address stays the namespace's while it cools down, and a deleted VM's while it is retained (ipkeeper.io/retain-addresses-for); "+
		"free some, or ask the pool's administrator for a larger quota",
		e.Namespace, e.Held, e.Pool, e.Limit)
}

// Is makes an ExceededError an ErrExceeded.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Limit returns the pool's spec.maxAddressesPerNamespace, 0 for none (or
// no pool).
func Limit(pool *ipkeeperv1alpha1.IPPool) int {
	if pool == nil {
		return 0
	}
	if q := pool.Spec.MaxAddressesPerNamespace; q != nil && *q > 0 {
		return int(*q)
	}
	return 0
}

// Check applies the rule: a namespace holding held addresses of pool,
// those being asked for included, stays within limit (0: no limit);
// otherwise an *ExceededError.
func Check(pool string, limit int, namespace string, held int) error {
	if limit <= 0 || held <= limit {
		return nil
	}
	return &ExceededError{Pool: pool, Namespace: namespace, Limit: limit, Held: held - 1}
}

// Counter counts, live, the reservations of a pool whose owner is of a
// namespace, released ones included.
type Counter func(ctx context.Context, pool, namespace string) (int, error)

// Confirm is the check after a create: the namespace, counted live with
// the reservation just created, holds no more than limit. An error other
// than an *ExceededError is the count's: the create is then not
// confirmed either.
func Confirm(ctx context.Context, count Counter, pool string, limit int, namespace string) error {
	if limit <= 0 {
		return nil
	}
	held, err := count(ctx, pool, namespace)
	if err != nil {
		return fmt.Errorf("counting the addresses namespace %q holds in IPPool %q (its spec.maxAddressesPerNamespace): %w", namespace, pool, err)
	}
	return Check(pool, limit, namespace, held)
}

// listPage bounds one page of Live's list; a namespace holds about its
// quota, so one page is the rule.
const listPage = 500

// Live counts through r, a reader of the API server (never a cache: the
// count must include what other writers created an instant ago), by the
// field selectors spec.pool and spec.owner.namespace, so the API server
// sends only the namespace's reservations of the pool.
func Live(r client.Reader) Counter {
	return func(ctx context.Context, pool, namespace string) (int, error) {
		n := 0
		opts := []client.ListOption{client.MatchingFields{"spec.pool": pool, OwnerNamespaceField: namespace}, client.Limit(listPage)}
		for cont := ""; ; {
			var list ipkeeperv1alpha1.IPReservationList
			if err := r.List(ctx, &list, append(opts, client.Continue(cont))...); err != nil {
				return 0, fmt.Errorf("listing reservations of IPPool %q held in namespace %q: %w", pool, namespace, err)
			}
			n += len(list.Items)
			if cont = list.Continue; cont == "" {
				return n, nil
			}
		}
	}
}

// ReportFrom is how many addresses a namespace holds from which the
// pool's status lists it (v1alpha1.NamespaceUsageReportPercent of limit,
// at least 1); 0 without a limit: none listed.
func ReportFrom(limit int) int {
	if limit <= 0 {
		return 0
	}
	return max(1, (limit*ipkeeperv1alpha1.NamespaceUsageReportPercent+99)/100)
}

// Report renders the namespaces' usage for status.namespaces: the fullest
// first (then by name), at most v1alpha1.NamespaceUsageReportMax; nil for
// none.
func Report(held map[string]int64) []ipkeeperv1alpha1.NamespaceUsage {
	if len(held) == 0 {
		return nil
	}
	out := make([]ipkeeperv1alpha1.NamespaceUsage, 0, len(held))
	for ns, n := range held {
		out = append(out, ipkeeperv1alpha1.NamespaceUsage{Namespace: ns, Used: n})
	}
	slices.SortFunc(out, func(a, b ipkeeperv1alpha1.NamespaceUsage) int {
		if c := cmp.Compare(b.Used, a.Used); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
	return out[:min(len(out), ipkeeperv1alpha1.NamespaceUsageReportMax)]
}
