// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// res is a reservation of pool on network holding ip.
func res(pool, network, ip string) *v1alpha1.IPReservation {
	r := &v1alpha1.IPReservation{Spec: v1alpha1.IPReservationSpec{Pool: pool, Network: network, IP: ip}}
	r.Name = fmt.Sprintf("%s.%s.%s", pool, network, ip)
	return r
}

func cooling(r *v1alpha1.IPReservation) *v1alpha1.IPReservation {
	r.Spec.ReuseAfter = &metav1.Time{}
	return r
}

// claimRes makes r a Cluster API IPAddressClaim's.
func claimRes(r *v1alpha1.IPReservation) *v1alpha1.IPReservation {
	r.Spec.Owner = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: "ns", Name: "m", UID: "u"}
	return r
}

func poolOf(name string, ranges ...v1alpha1.PoolRange) *v1alpha1.IPPool {
	p := &v1alpha1.IPPool{Spec: v1alpha1.IPPoolSpec{Ranges: ranges}}
	p.Name, p.Generation = name, 3
	return p
}

// statusOf feeds rs into a fresh Index and returns pool's desired status.
func statusOf(t *testing.T, pool *v1alpha1.IPPool, rs ...*v1alpha1.IPReservation) v1alpha1.IPPoolStatus {
	t.Helper()
	x := reservationindex.NewAddresses()
	for _, r := range rs {
		x.Set(r)
	}
	ranges, err := ipamconfig.PoolRanges(&pool.Spec)
	return desiredStatus(pool, ranges, err, x.Count(pool.Name, ranges, poolquota.ReportFrom(poolquota.Limit(pool))))
}

func pu(size string, used int64, free string) v1alpha1.PoolUsage {
	return v1alpha1.PoolUsage{Size: size, Used: used, Free: free}
}

func TestCounting(t *testing.T) {
	v4 := v1alpha1.PoolRange{Range: "10.0.0.0/24"}
	tests := []struct {
		name        string
		pool        *v1alpha1.IPPool
		held        []*v1alpha1.IPReservation
		total       v1alpha1.PoolUsage
		ranges      []v1alpha1.PoolUsage
		families    map[string]v1alpha1.PoolUsage
		outOfRange  int64
		coolingDown int64
		networks    []string
	}{{
		name:     "one range",
		pool:     poolOf("p", v4),
		held:     []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1"), res("p", "a", "10.0.0.2"), res("p", "b", "10.0.0.254")},
		total:    pu("254", 3, "251"),
		ranges:   []v1alpha1.PoolUsage{pu("254", 3, "251")},
		families: map[string]v1alpha1.PoolUsage{"IPv4": pu("254", 3, "251")},
		networks: []string{"a", "b"},
	}, {
		name:     "other pools and empty pool",
		pool:     poolOf("p", v4),
		held:     []*v1alpha1.IPReservation{res("q", "a", "10.0.0.1")},
		total:    pu("254", 0, "254"),
		ranges:   []v1alpha1.PoolUsage{pu("254", 0, "254")},
		families: map[string]v1alpha1.PoolUsage{"IPv4": pu("254", 0, "254")},
	}, {
		name: "excluded address held: out of range",
		pool: poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/24", Exclude: []string{"10.0.0.0/28"}}),
		held: []*v1alpha1.IPReservation{res("p", "a", "10.0.0.3"), res("p", "a", "10.0.0.20")},
		// .16-.254
		total: pu("239", 1, "238"), ranges: []v1alpha1.PoolUsage{pu("239", 1, "238")},
		families:   map[string]v1alpha1.PoolUsage{"IPv4": pu("239", 1, "238")},
		outOfRange: 1, networks: []string{"a"},
	}, {
		name:  "gateway held: out of range, not in the size",
		pool:  poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/24", Gateway: "10.0.0.1"}),
		held:  []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1"), res("p", "a", "10.0.0.2")},
		total: pu("253", 1, "252"), ranges: []v1alpha1.PoolUsage{pu("253", 1, "252")},
		families:   map[string]v1alpha1.PoolUsage{"IPv4": pu("253", 1, "252")},
		outOfRange: 1, networks: []string{"a"},
	}, {
		name:  "range removed while held: out of range",
		pool:  poolOf("p", v4),
		held:  []*v1alpha1.IPReservation{res("p", "a", "10.0.0.9"), res("p", "a", "10.0.1.9"), res("p", "a", "10.0.1.10")},
		total: pu("254", 1, "253"), ranges: []v1alpha1.PoolUsage{pu("254", 1, "253")},
		families:   map[string]v1alpha1.PoolUsage{"IPv4": pu("254", 1, "253")},
		outOfRange: 2, networks: []string{"a"},
	}, {
		name: "outside start..end: out of range; two ranges of one subnet",
		pool: poolOf("p",
			v1alpha1.PoolRange{Range: "10.0.0.0/24", RangeStart: "10.0.0.10", RangeEnd: "10.0.0.19"},
			v1alpha1.PoolRange{Range: "10.0.0.0/24", RangeStart: "10.0.0.20", RangeEnd: "10.0.0.29"}),
		held:       []*v1alpha1.IPReservation{res("p", "a", "10.0.0.10"), res("p", "a", "10.0.0.25"), res("p", "a", "10.0.0.26"), res("p", "a", "10.0.0.30")},
		total:      pu("20", 3, "17"),
		ranges:     []v1alpha1.PoolUsage{pu("10", 1, "9"), pu("10", 2, "8")},
		families:   map[string]v1alpha1.PoolUsage{"IPv4": pu("20", 3, "17")},
		outOfRange: 1, networks: []string{"a"},
	}, {
		name: "dual-stack, IPv6 sizes beyond 64 bits exact",
		pool: poolOf("p", v1alpha1.PoolRange{Range: "fd00::/48"}, v4, v1alpha1.PoolRange{Range: "fd01::/64"}),
		held: []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1"), res("p", "a", "fd00::1"), res("p", "a", "fd01::1"), res("p", "a", "fd01::2")},
		// 2^80-1 + 254 + 2^64-1
		total: pu("1208944266358702884258044", 4, "1208944266358702884258040"),
		ranges: []v1alpha1.PoolUsage{
			pu("1208925819614629174706175", 1, "1208925819614629174706174"),
			pu("254", 1, "253"),
			pu("18446744073709551615", 2, "18446744073709551613"),
		},
		families: map[string]v1alpha1.PoolUsage{
			"IPv4": pu("254", 1, "253"),
			"IPv6": pu("1208944266358702884257790", 3, "1208944266358702884257787"),
		},
		networks: []string{"a"},
	}, {
		// coolingDown is part of used: a cooling address out of range is
		// counted in outOfRange only.
		name:  "cooling down: used and cooling",
		pool:  poolOf("p", v4),
		held:  []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1"), cooling(res("p", "a", "10.0.0.2")), cooling(res("p", "a", "10.9.0.2"))},
		total: pu("254", 2, "252"), ranges: []v1alpha1.PoolUsage{pu("254", 2, "252")},
		families:   map[string]v1alpha1.PoolUsage{"IPv4": pu("254", 2, "252")},
		outOfRange: 1, coolingDown: 1, networks: []string{"a"},
	}, {
		// A Cluster API claim's reservation carries the pool's name as its
		// network; it is used, but no CNI network.
		name: "IPAddressClaim reservations are used, but not networks",
		pool: poolOf("p", v4),
		held: []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1"), claimRes(res("p", "p", "10.0.0.2")),
			cooling(claimRes(res("p", "p", "10.0.0.3")))},
		total: pu("254", 3, "251"), ranges: []v1alpha1.PoolUsage{pu("254", 3, "251")},
		families:    map[string]v1alpha1.PoolUsage{"IPv4": pu("254", 3, "251")},
		coolingDown: 1, networks: []string{"a"},
	}, {
		name:  "one address held twice counts once; cooling only if every holder released it",
		pool:  poolOf("p", v4),
		held:  []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1"), cooling(res("p", "b", "10.0.0.1"))},
		total: pu("254", 1, "253"), ranges: []v1alpha1.PoolUsage{pu("254", 1, "253")},
		families: map[string]v1alpha1.PoolUsage{"IPv4": pu("254", 1, "253")},
		networks: []string{"a", "b"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := statusOf(t, tt.pool, tt.held...)
			if got := (v1alpha1.PoolUsage{Size: st.Size, Used: st.Used, Free: st.Free}); got != tt.total {
				t.Errorf("total = %+v, want %+v", got, tt.total)
			}
			if len(st.Ranges) != len(tt.ranges) {
				t.Fatalf("ranges = %+v, want %d", st.Ranges, len(tt.ranges))
			}
			for i, ru := range st.Ranges {
				if ru.Range != tt.pool.Spec.Ranges[i].Range || ru.PoolUsage != tt.ranges[i] {
					t.Errorf("ranges[%d] = %+v, want %s %+v", i, ru, tt.pool.Spec.Ranges[i].Range, tt.ranges[i])
				}
			}
			var fams []string
			for _, f := range st.Families {
				fams = append(fams, f.Family)
				if f.PoolUsage != tt.families[f.Family] {
					t.Errorf("family %s = %+v, want %+v", f.Family, f.PoolUsage, tt.families[f.Family])
				}
			}
			if len(fams) != len(tt.families) || (len(fams) == 2 && fams[0] != "IPv4") {
				t.Errorf("families %v, want %d, IPv4 first", fams, len(tt.families))
			}
			if st.CoolingDown > st.Used {
				t.Errorf("coolingDown %d > used %d: it is counted in used", st.CoolingDown, st.Used)
			}
			if st.OutOfRange != tt.outOfRange || st.CoolingDown != tt.coolingDown {
				t.Errorf("outOfRange, coolingDown = %d, %d; want %d, %d", st.OutOfRange, st.CoolingDown, tt.outOfRange, tt.coolingDown)
			}
			if !slices.Equal(st.Networks, tt.networks) {
				t.Errorf("networks = %q, want %q", st.Networks, tt.networks)
			}
			if st.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d, want 3", st.ObservedGeneration)
			}
			if c := meta.FindStatusCondition(st.Conditions, v1alpha1.PoolReady); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v, want True", c)
			}
		})
	}
}

func TestConditions(t *testing.T) {
	small := v1alpha1.PoolRange{Range: "10.0.0.0/29"} // .1-.6
	held := func(n int, prefix string) []*v1alpha1.IPReservation {
		var out []*v1alpha1.IPReservation
		for i := 1; i <= n; i++ {
			out = append(out, res("p", "a", fmt.Sprintf("%s%d", prefix, i)))
		}
		return out
	}
	withThreshold := func(p *v1alpha1.IPPool, pct int32) *v1alpha1.IPPool {
		p.Spec.WarningThresholdPercent = ptr.To(pct)
		return p
	}
	tests := []struct {
		name              string
		pool              *v1alpha1.IPPool
		held              []*v1alpha1.IPReservation
		exhausted, nearly metav1.ConditionStatus
		nearlyMsg, exhMsg string
	}{
		{"empty", poolOf("p", small), nil, metav1.ConditionFalse, metav1.ConditionFalse, "below the warning threshold of 90%", ""},
		{"5 of 6 below the default 90%", poolOf("p", small), held(5, "10.0.0."), metav1.ConditionFalse, metav1.ConditionFalse, "", ""},
		{"3 of 6 at a 50% threshold", withThreshold(poolOf("p", small), 50), held(3, "10.0.0."), metav1.ConditionFalse, metav1.ConditionTrue, "IPv4: 3 of 6 addresses used (50%)", ""},
		{"2 of 6 below a 50% threshold", withThreshold(poolOf("p", small), 50), held(2, "10.0.0."), metav1.ConditionFalse, metav1.ConditionFalse, "", ""},
		{"6 of 6: exhausted", poolOf("p", small), held(6, "10.0.0."), metav1.ConditionTrue, metav1.ConditionTrue, "", "IPv4: all 6 addresses used"},
		{"out-of-range addresses do not fill the pool", poolOf("p", small), held(6, "10.0.1."), metav1.ConditionFalse, metav1.ConditionFalse, "", ""},
		{"one family full is exhausted though the other is empty", poolOf("p", small, v1alpha1.PoolRange{Range: "fd00::/64"}), held(6, "10.0.0."), metav1.ConditionTrue, metav1.ConditionTrue, "IPv4: 6 of 6", "IPv4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := statusOf(t, tt.pool, tt.held...)
			ex := meta.FindStatusCondition(st.Conditions, v1alpha1.PoolExhausted)
			ne := meta.FindStatusCondition(st.Conditions, v1alpha1.PoolNearlyExhausted)
			if ex == nil || ne == nil {
				t.Fatalf("conditions missing: %+v", st.Conditions)
			}
			if ex.Status != tt.exhausted || !strings.Contains(ex.Message, tt.exhMsg) {
				t.Errorf("Exhausted = %s %q, want %s containing %q", ex.Status, ex.Message, tt.exhausted, tt.exhMsg)
			}
			if ne.Status != tt.nearly || !strings.Contains(ne.Message, tt.nearlyMsg) {
				t.Errorf("NearlyExhausted = %s %q, want %s containing %q", ne.Status, ne.Message, tt.nearly, tt.nearlyMsg)
			}
			if ne.ObservedGeneration != 3 {
				t.Errorf("condition observedGeneration = %d, want 3", ne.ObservedGeneration)
			}
		})
	}
}

func TestInvalidSpec(t *testing.T) {
	pool := poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/24"}, v1alpha1.PoolRange{Range: "10.0.1.0/24", RangeStart: "10.0.2.5"})
	st := statusOf(t, pool, res("p", "a", "10.0.0.1"), res("p", "a", "10.0.1.1"))
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.PoolReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.PoolReasonInvalidSpec {
		t.Fatalf("Ready = %+v, want False/%s", ready, v1alpha1.PoolReasonInvalidSpec)
	}
	for _, want := range []string{"spec.ranges[1].range_start", "10.0.2.5"} {
		if !strings.Contains(ready.Message, want) {
			t.Errorf("Ready message %q does not name %q", ready.Message, want)
		}
	}
	if st.Size != "0" || st.Free != "0" || st.Used != 0 || st.OutOfRange != 2 || len(st.Ranges) != 0 {
		t.Errorf("usage of an invalid pool = size %s used %d free %s outOfRange %d ranges %v; want 0/0/0/2/none", st.Size, st.Used, st.Free, st.OutOfRange, st.Ranges)
	}
	for _, typ := range []string{v1alpha1.PoolExhausted, v1alpha1.PoolNearlyExhausted} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != metav1.ConditionUnknown {
			t.Errorf("%s = %+v, want Unknown", typ, c)
		}
	}
}

// Unchanged conditions keep their transition time, so an unchanged pool
// compares equal and is not written.
func TestUnchangedStatusIsEqual(t *testing.T) {
	pool := poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/24"})
	held := []*v1alpha1.IPReservation{res("p", "a", "10.0.0.1")}
	pool.Status = statusOf(t, pool, held...)
	again := statusOf(t, pool, held...)
	if !equality.Semantic.DeepEqual(again, pool.Status) {
		t.Errorf("recount of an unchanged pool differs:\n%+v\n%+v", again, pool.Status)
	}
}

func TestCrossings(t *testing.T) {
	c := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "R" + string(s), Message: typ + " " + string(s)}
	}
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
		U = metav1.ConditionUnknown
	)
	ne, ex := v1alpha1.PoolNearlyExhausted, v1alpha1.PoolExhausted
	tests := []struct {
		name          string
		before, after []metav1.Condition
		want          []string // "Warning/reason" or "Normal/reason"
	}{
		{"new pool below", nil, []metav1.Condition{c(ne, F), c(ex, F)}, nil},
		{"new pool above", nil, []metav1.Condition{c(ne, T), c(ex, F)}, []string{"Warning/NearlyExhausted"}},
		{"stays above", []metav1.Condition{c(ne, T), c(ex, F)}, []metav1.Condition{c(ne, T), c(ex, F)}, nil},
		{"crosses into both", []metav1.Condition{c(ne, F), c(ex, F)}, []metav1.Condition{c(ne, T), c(ex, T)}, []string{"Warning/NearlyExhausted", "Warning/Exhausted"}},
		{"frees one", []metav1.Condition{c(ne, T), c(ex, T)}, []metav1.Condition{c(ne, T), c(ex, F)}, []string{"Normal/RFalse"}},
		{"back below", []metav1.Condition{c(ne, T), c(ex, F)}, []metav1.Condition{c(ne, F), c(ex, F)}, []string{"Normal/RFalse"}},
		{"invalid spec is no crossing", []metav1.Condition{c(ne, T), c(ex, F)}, []metav1.Condition{c(ne, U), c(ex, U)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, x := range crossings(tt.before, tt.after) {
				kind := "Normal"
				if x.warning {
					kind = "Warning"
				}
				got = append(got, kind+"/"+x.reason)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("crossings = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecimal(t *testing.T) {
	for s, want := range map[string]float64{"0": 0, "254": 254, "18446744073709551615": 18446744073709551615, "junk": 0} {
		if got := decimal(s); got != want {
			t.Errorf("decimal(%q) = %v, want %v", s, got, want)
		}
	}
}

// An edit that moves a range's gateway onto an address a reservation
// holds is reported on the pool (GatewayInUse=True, naming the gateway),
// with a Warning event when it starts.
func TestGatewayInUse(t *testing.T) {
	pool := poolOf("blue", v1alpha1.PoolRange{Range: "10.0.0.0/24", Gateway: "10.0.0.7"})
	before := statusOf(t, pool, res("blue", "blue", "10.0.0.9"))
	if c := meta.FindStatusCondition(before.Conditions, v1alpha1.PoolGatewayInUse); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("GatewayInUse with the gateway free = %+v, want False", c)
	}
	pool.Status = before
	after := statusOf(t, pool, res("blue", "blue", "10.0.0.9"), res("blue", "blue", "10.0.0.7"))
	c := meta.FindStatusCondition(after.Conditions, v1alpha1.PoolGatewayInUse)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.PoolReasonGatewayHeld || !strings.Contains(c.Message, "gateway 10.0.0.7 is held") {
		t.Fatalf("GatewayInUse with the gateway held = %+v, want True naming 10.0.0.7", c)
	}
	if r := meta.FindStatusCondition(after.Conditions, v1alpha1.PoolReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v: the spec is valid, allocations proceed", r)
	}
	var warned bool
	for _, x := range crossings(before.Conditions, after.Conditions) {
		warned = warned || (x.warning && x.reason == v1alpha1.PoolGatewayInUse)
	}
	if !warned {
		t.Errorf("no Warning event when the gateway became held")
	}
}

// TestNamespacesNearTheirQuota: a pool with spec.maxAddressesPerNamespace
// lists in status.namespaces the namespaces holding at least 80% of it,
// released (cooling or retained) reservations included, the fullest
// first; a pool without a quota lists none.
func TestNamespacesNearTheirQuota(t *testing.T) {
	in := func(ns string, r *v1alpha1.IPReservation) *v1alpha1.IPReservation {
		r.Spec.Owner = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerPod, Namespace: ns, Name: "p", UID: "u"}
		return r
	}
	rs := []*v1alpha1.IPReservation{
		in("full", res("q", "n", "10.0.0.1")), in("full", cooling(res("q", "n", "10.0.0.2"))),
		in("full", res("q", "n", "10.0.0.3")), in("full", res("q", "n", "10.0.0.4")), in("full", res("q", "n", "10.0.0.5")),
		in("near", res("q", "n", "10.0.0.6")), in("near", res("q", "n", "10.0.0.7")),
		in("near", res("q", "n", "10.0.0.8")), in("near", res("q", "n", "10.0.0.9")),
		in("low", res("q", "n", "10.0.0.10")),
	}
	pool := poolOf("q", v1alpha1.PoolRange{Range: "10.0.0.0/24"})
	if got := statusOf(t, pool, rs...).Namespaces; got != nil {
		t.Fatalf("status.namespaces of a pool without a quota = %v, want none", got)
	}
	pool.Spec.MaxAddressesPerNamespace = ptr.To[int32](5)
	want := []v1alpha1.NamespaceUsage{{Namespace: "full", Used: 5}, {Namespace: "near", Used: 4}}
	if got := statusOf(t, pool, rs...).Namespaces; !slices.Equal(got, want) {
		t.Fatalf("status.namespaces with spec.maxAddressesPerNamespace 5 = %v, want %v", got, want)
	}
}
