// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// checkPoolRef validates ipam.pool and refuses range keys next to it: the
// pool is the network's one definition, so a NAD may not add its own.
func checkPoolRef(ipam *rawIPAM) error {
	if errs := validation.IsDNS1123Subdomain(ipam.Pool); len(errs) > 0 {
		return fieldErr("ipam.pool", " %q is not a valid IPPool name: %s", ipam.Pool, strings.Join(errs, "; "))
	}
	for _, kv := range [][2]string{
		{"ipam.range", ipam.Range}, {"ipam.range_start", ipam.RangeStart},
		{"ipam.range_end", ipam.RangeEnd}, {"ipam.gateway", ipam.Gateway},
	} {
		if strings.TrimSpace(kv[1]) != "" {
			return fieldErr(kv[0], " %q cannot be combined with ipam.pool %q: the IPPool defines the network's ranges; remove one of them", kv[1], ipam.Pool)
		}
	}
	if len(ipam.Exclude) > 0 {
		return fieldErr("ipam.exclude", " cannot be combined with ipam.pool %q: put excludes in the IPPool", ipam.Pool)
	}
	if len(ipam.IPRanges) > 0 {
		return fieldErr("ipam.ipRanges", " cannot be combined with ipam.pool %q: the IPPool defines the network's ranges", ipam.Pool)
	}
	return nil
}

// PoolRanges parses and validates an IPPool's spec (its ranges, and the
// other fields a reader could not use). Unlike a NAD's inline ranges, a
// pool may have several ranges per family (that is how it grows), but no
// two may overlap. Errors are *FieldError values naming the field
// ("spec.ranges[1].range_start") and the value.
func PoolRanges(spec *v1alpha1.IPPoolSpec) ([]iprange.Range, error) {
	if d := spec.ReuseCooldown; d != nil && d.Invalid != "" {
		return nil, fieldErr("spec.reuseCooldown", " %q is not a duration (such as 30s, 5m or 1h30m)", d.Invalid)
	}
	if len(spec.Ranges) == 0 {
		return nil, fieldErr("spec.ranges", ": at least one range is required")
	}
	out := make([]iprange.Range, 0, len(spec.Ranges))
	for i, pr := range spec.Ranges {
		field := indexed("spec.ranges", i)
		rb, err := parseRange(field, rawRange{
			Range: pr.Range, RangeStart: pr.RangeStart, RangeEnd: pr.RangeEnd, Exclude: pr.Exclude, Gateway: pr.Gateway,
		})
		if err != nil {
			return nil, err
		}
		if err := rb.checkReservable(); err != nil {
			return nil, err
		}
		r, err := rb.build()
		if err != nil {
			return nil, err
		}
		for j, prev := range out {
			if overlap(prev, r) {
				return nil, fieldErr(field+".range", " %q overlaps spec.ranges[%d] %q", pr.Range, j, spec.Ranges[j].Range)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// overlap reports whether two ranges share an address that either could hand out.
func overlap(a, b iprange.Range) bool {
	if a.Is4() != b.Is4() {
		return false
	}
	return !a.End().Less(b.Start()) && !b.End().Less(a.Start())
}

// Overlapping returns the first pair of ranges, one from each list, that
// share an address either could hand out.
func Overlapping(a, b []iprange.Range) (iprange.Range, iprange.Range, bool) {
	for _, x := range a {
		for _, y := range b {
			if overlap(x, y) {
				return x, y, true
			}
		}
	}
	return iprange.Range{}, iprange.Range{}, false
}

// SpecRanges renders parsed ranges as IPPool spec ranges, in a canonical
// form (subnet CIDR, explicit bounds, masked excludes): what an inline
// network's pool is created with.
func SpecRanges(ranges []iprange.Range) []v1alpha1.PoolRange {
	out := make([]v1alpha1.PoolRange, len(ranges))
	for i, r := range ranges {
		pr := v1alpha1.PoolRange{Range: r.Subnet().String(), RangeStart: r.Start().String(), RangeEnd: r.End().String()}
		for _, p := range r.Excludes() {
			pr.Exclude = append(pr.Exclude, p.String())
		}
		if gw := r.Gateway(); gw.IsValid() {
			pr.Gateway = gw.String()
		}
		out[i] = pr
	}
	return out
}

// Definition renders ranges canonically, so two configurations that hand
// out the same addresses with the same gateways compare equal however
// they were written: the form an inline pool records and NADs are
// compared by.
func Definition(ranges []iprange.Range) string {
	b, _ := json.Marshal(SpecRanges(ranges)) // strings only: cannot fail
	return string(b)
}

// ErrNamespaceNotAdmitted is wrapped by PoolAdmits' errors.
var ErrNamespaceNotAdmitted = errors.New("namespace not admitted")

// PoolAdmits applies an IPPool's spec.namespaceSelector, the one rule for
// which namespaces may take addresses from it: nil when namespace (with
// its labels) may, an error naming the pool and the namespace (never the
// selector, which may name other tenants' labels) when it may not. An
// inline network's pool is made from its NADs; it admits every namespace
// unless an administrator set a selector.
func PoolAdmits(pool *v1alpha1.IPPool, namespace string, labels map[string]string) error {
	if pool.Spec.NamespaceSelector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NamespaceSelector)
	if err != nil {
		return fieldErr("spec.namespaceSelector", " of IPPool %q: %v", pool.Name, err)
	}
	if sel.Matches(k8slabels.Set(labels)) {
		return nil
	}
	return fmt.Errorf("%w: IPPool %q does not admit namespace %q (its spec.namespaceSelector); use a pool made for this namespace, or ask the pool's administrator",
		ErrNamespaceNotAdmitted, pool.Name, namespace)
}
