// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

const benchReservations = 50_000

// benchPool is a dual-stack pool with an exclude and a gateway.
func benchPool() *v1alpha1.IPPool {
	return poolOf("big",
		v1alpha1.PoolRange{Range: "10.0.0.0/16", Gateway: "10.0.0.1", Exclude: []string{"10.0.255.0/24"}},
		v1alpha1.PoolRange{Range: "10.1.0.0/16"},
		v1alpha1.PoolRange{Range: "fd00::/64"})
}

// benchReservationsOf returns n reservations of pool "big": 4 in 5 IPv4
// (spread over both IPv4 ranges, some out of range), 1 in 5 IPv6, every
// tenth cooling down, over 20 networks.
func benchReservationsOf(n int) []*v1alpha1.IPReservation {
	out := make([]*v1alpha1.IPReservation, n)
	v4 := netip.MustParseAddr("10.0.200.0") // through the exclude into the second range
	v6 := netip.MustParseAddr("fd00::1")
	for i := range out {
		var ip netip.Addr
		if i%5 == 4 {
			ip, v6 = v6, v6.Next()
		} else {
			ip, v4 = v4, v4.Next()
		}
		r := res("big", fmt.Sprintf("net-%d", i%20), ip.String())
		if i%10 == 0 {
			r = cooling(r)
		}
		out[i] = r
	}
	return out
}

// BenchmarkRecount50k is what one pool reconcile costs with 50k
// reservations in the pool: count against the ranges and build the status.
func BenchmarkRecount50k(b *testing.B) {
	pool := benchPool()
	x := reservationindex.NewAddresses()
	for _, r := range benchReservationsOf(benchReservations) {
		x.Set(r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ranges, err := ipamconfig.PoolRanges(&pool.Spec)
		st := desiredStatus(pool, ranges, err, x.Count(pool.Name, ranges, 0))
		if st.Used+st.OutOfRange != benchReservations {
			b.Fatalf("counted %d used + %d out of range, want %d", st.Used, st.OutOfRange, benchReservations)
		}
	}
}

// BenchmarkFeed50k is the informer's initial sync: 50k add events into an
// empty Index (per op: all 50k).
func BenchmarkFeed50k(b *testing.B) {
	rs := benchReservationsOf(benchReservations)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		x := reservationindex.NewAddresses()
		for _, r := range rs {
			x.Set(r)
		}
	}
}

// BenchmarkEvent is one reservation event (a delete and a re-add) in a
// pool of 50k.
func BenchmarkEvent(b *testing.B) {
	rs := benchReservationsOf(benchReservations)
	x := reservationindex.NewAddresses()
	for _, r := range rs {
		x.Set(r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		r := rs[i%len(rs)]
		x.Delete(r.Name)
		x.Set(r)
		i++
	}
}

// The benchmark pool's counts are what the ranges say, so the benchmark
// measures the real path (excluded and network addresses out of range).
func TestBenchPoolCounts(t *testing.T) {
	st := statusOf(t, benchPool(), benchReservationsOf(benchReservations)...)
	// IPv4: 10.0.200.0-10.1.100.63; out of range: the exclude
	// 10.0.255.0/24 (with the broadcast) and 10.1.0.0, the IPv4 addresses
	// k = 14080..14336 from the start. Every tenth reservation cools down,
	// i.e. IPv4 addresses with k%8 == 0: 33 of them are out of range, and
	// coolingDown counts only those in used.
	const coolingOutOfRange = 33
	if st.OutOfRange != 257 || st.Used != benchReservations-257 || st.CoolingDown != benchReservations/10-coolingOutOfRange {
		t.Errorf("used %d, out of range %d, cooling %d", st.Used, st.OutOfRange, st.CoolingDown)
	}
	if len(st.Networks) != 20 {
		t.Errorf("networks = %d, want 20", len(st.Networks))
	}
}
