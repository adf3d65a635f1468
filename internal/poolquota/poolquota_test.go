// SPDX-License-Identifier: Apache-2.0

package poolquota

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestCheckAndConfirm: the rule refuses a namespace whose count, the
// address asked for included, is beyond the pool's quota, with an error
// naming the namespace, the pool and the quota; no quota refuses nothing
// and counts nothing.
func TestCheckAndConfirm(t *testing.T) {
	pool := &ipkeeperv1alpha1.IPPool{}
	pool.Name = "blue"
	if got := Limit(pool); got != 0 {
		t.Fatalf("Limit of a pool without spec.maxAddressesPerNamespace = %d, want 0", got)
	}
	pool.Spec.MaxAddressesPerNamespace = ptr.To[int32](2)
	limit := Limit(pool)
	for _, tc := range []struct {
		held    int
		refused bool
	}{{0, false}, {1, false}, {2, false}, {3, true}, {9, true}} {
		err := Check("blue", limit, "dev", tc.held)
		if (err != nil) != tc.refused || (err != nil && !errors.Is(err, ErrExceeded)) {
			t.Errorf("Check with %d held (the new one included), quota %d = %v, refused %v wanted", tc.held, limit, err, tc.refused)
		}
	}
	err := Check("blue", limit, "dev", 3)
	for _, want := range []string{`namespace "dev" holds 2 addresses`, `IPPool "blue"`, "spec.maxAddressesPerNamespace is 2", "retain-addresses-for"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := Check("blue", 0, "dev", 1000); err != nil {
		t.Errorf("Check without a quota = %v, want nil", err)
	}

	counted := 0
	count := func(_ context.Context, pool, ns string) (int, error) {
		counted++
		if pool != "blue" || ns != "dev" {
			t.Errorf("counted pool %q namespace %q, want blue, dev", pool, ns)
		}
		return 3, nil
	}
	if err := Confirm(context.Background(), count, "blue", 0, "dev"); err != nil || counted != 0 {
		t.Errorf("Confirm without a quota = %v after %d counts, want nil and none", err, counted)
	}
	if err := Confirm(context.Background(), count, "blue", 2, "dev"); !errors.Is(err, ErrExceeded) {
		t.Errorf("Confirm of a namespace counted at 3 against quota 2 = %v, want ErrExceeded", err)
	}
	broken := func(context.Context, string, string) (int, error) { return 0, errors.New("connection refused") }
	if err := Confirm(context.Background(), broken, "blue", 2, "dev"); err == nil || errors.Is(err, ErrExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Confirm whose count fails = %v, want the count's error, not ErrExceeded", err)
	}
}

// TestReport: the pool's status lists the namespaces from 80% of the
// quota on, the fullest first, at most NamespaceUsageReportMax.
func TestReport(t *testing.T) {
	for limit, want := range map[int]int{0: 0, 1: 1, 2: 2, 5: 4, 10: 8, 64: 52} {
		if got := ReportFrom(limit); got != want {
			t.Errorf("ReportFrom(%d) = %d, want %d", limit, got, want)
		}
	}
	if got := Report(nil); got != nil {
		t.Errorf("Report(nil) = %v, want nil", got)
	}
	held := map[string]int64{}
	for i := range 15 {
		held[string(rune('a'+i))] = int64(i % 4)
	}
	got := Report(held)
	if len(got) != ipkeeperv1alpha1.NamespaceUsageReportMax || got[0] != (ipkeeperv1alpha1.NamespaceUsage{Namespace: "d", Used: 3}) {
		t.Fatalf("Report of 15 namespaces = %v, want %d, d first", got, ipkeeperv1alpha1.NamespaceUsageReportMax)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Used > got[i-1].Used {
			t.Fatalf("Report not fullest first: %v", got)
		}
	}
}
