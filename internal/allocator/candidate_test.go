// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

func TestPick(t *testing.T) {
	tests := []struct {
		name  string
		ipam  string
		taken []string
		h     [16]byte // hashed seed; reduced modulo the usable count
		want  string
	}{
		{"/30 first", `{"range":"10.0.0.0/30"}`, nil, u(0), "10.0.0.1"},
		{"/30 offset 1", `{"range":"10.0.0.0/30"}`, nil, u(1), "10.0.0.2"},
		{"/30 offset wraps modulo size", `{"range":"10.0.0.0/30"}`, nil, u(3), "10.0.0.2"},
		{"/30 first taken", `{"range":"10.0.0.0/30"}`, []string{"10.0.0.1"}, u(0), "10.0.0.2"},
		{"/30 scan wraps to start", `{"range":"10.0.0.0/30"}`, []string{"10.0.0.2"}, u(1), "10.0.0.1"},
		{"/29 wraps past broadcast", `{"range":"10.0.0.0/29"}`, []string{"10.0.0.6"}, u(5), "10.0.0.1"},
		{"/31 both usable", `{"range":"10.0.0.0/31"}`, []string{"10.0.0.0"}, u(0), "10.0.0.1"},
		{"/31 offset 1", `{"range":"10.0.0.0/31"}`, nil, u(1), "10.0.0.1"},
		{"/32 the one address", `{"range":"10.0.0.9/32"}`, nil, u(12345), "10.0.0.9"},
		{"/24 all but one taken", `{"range":"10.0.0.0/24"}`, []string{"10.0.0.0/26", "10.0.0.64/27", "10.0.0.96/28", "10.0.0.112/30", "10.0.0.116/31", "10.0.0.118", "10.0.0.120/29", "10.0.0.128/25"}, u(200), "10.0.0.119"},
		{"gateway skipped", `{"range":"10.0.0.0/29","gateway":"10.0.0.4"}`, []string{"10.0.0.3"}, u(2), "10.0.0.5"},
		{"offset counts usable addresses only", `{"range":"10.0.0.0/29","gateway":"10.0.0.4"}`, nil, u(3), "10.0.0.5"},
		{"exclude at start", `{"range":"10.0.0.0/24","exclude":["10.0.0.0/30"]}`, nil, u(0), "10.0.0.4"},
		{"exclude at end, last usable", `{"range":"10.0.0.0/24","exclude":["10.0.0.252/30"]}`, nil, u(250), "10.0.0.251"},
		{"exclude at end, wraps", `{"range":"10.0.0.0/24","exclude":["10.0.0.252/30"]}`, []string{"10.0.0.251"}, u(250), "10.0.0.1"},
		{"exclude in the middle is jumped", `{"range":"10.0.0.0/24","exclude":["10.0.0.16/28"]}`, []string{"10.0.0.15"}, u(14), "10.0.0.32"},
		{"overlapping excludes", `{"range":"10.0.0.0/24","exclude":["10.0.0.8/29","10.0.0.0/28","10.0.0.12/30"]}`, nil, u(0), "10.0.0.16"},
		{"nested excludes and gateway", `{"range":"10.0.0.0/24","gateway":"10.0.0.16","exclude":["10.0.0.0/28","10.0.0.4"]}`, nil, u(0), "10.0.0.17"},
		{"A-B sub-range", `{"range":"10.1.0.10-10.1.0.12/24"}`, []string{"10.1.0.10", "10.1.0.11"}, u(0), "10.1.0.12"},
		{"A-B sub-range wraps", `{"range":"10.1.0.10-10.1.0.12/24"}`, []string{"10.1.0.12"}, u(2), "10.1.0.10"},
		{"ipv6 /120", `{"range":"fd00::100/120"}`, nil, u(0), "fd00::101"},
		{"ipv6 /120 top", `{"range":"fd00::100/120"}`, nil, u(254), "fd00::1ff"},
		{"ipv6 /64 first", `{"range":"fd00::/64"}`, nil, u(0), "fd00::1"},
		{"ipv6 /64 last", `{"range":"fd00::/64"}`, nil, u(1<<64 - 2), "fd00::ffff:ffff:ffff:ffff"},
		{"ipv6 /64 size wraps", `{"range":"fd00::/64"}`, nil, u(1<<64 - 1), "fd00::1"},
		{"ipv6 /64 near top wraps around", `{"range":"fd00::/64"}`, []string{"fd00::ffff:ffff:ffff:fffd", "fd00::ffff:ffff:ffff:fffe", "fd00::ffff:ffff:ffff:ffff", "fd00::1"}, u(1<<64 - 4), "fd00::2"},
		{"ipv6 /48 offset beyond 64 bits is exact", `{"range":"fd00::/48"}`, nil, h128(1<<6, 5), "fd00:0:0:40::6"},
		{"ipv6 /48 top", `{"range":"fd00::/48"}`, nil, h128(1<<16-1, 1<<64-2), "fd00:0:0:ffff:ffff:ffff:ffff:ffff"},
		{"ipv6 exclude lower half of /64", `{"range":"fd00::/64","exclude":["fd00::/65"]}`, nil, u(0), "fd00::8000:0:0:0"},
		{"ipv6 exclude upper half of /64, wraps below it", `{"range":"fd00::/64","exclude":["fd00::8000:0:0:0/65"]}`, []string{"fd00::7fff:ffff:ffff:ffff"}, u(1<<63 - 2), "fd00::1"},
		{"ipv6 /127 both usable", `{"range":"fd00::/127"}`, []string{"fd00::"}, u(0), "fd00::1"},
		{"ipv6 /0 high offset (past the excluded IPv4-mapped block)", `{"range":"::/0","exclude":["::ffff:0:0/96"]}`, nil, h128(1<<63, 0), "8000::1:0:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parseRange(t, tt.ipam)
			got, err := pick(r, takenSet(t, tt.taken...), tt.h)
			if err != nil {
				t.Fatalf("pick: %v", err)
			}
			if want := netip.MustParseAddr(tt.want); got != want {
				t.Errorf("pick = %v, want %v", got, want)
			}
			if err := r.Usable(got); err != nil {
				t.Errorf("picked address not usable: %v", err)
			}
		})
	}
}

func TestCandidateExhausted(t *testing.T) {
	tests := []struct {
		name  string
		ipam  string
		taken []string
		msg   string
	}{
		{"/30", `{"range":"10.0.0.0/30"}`, []string{"10.0.0.0/30"}, "no free address in range 10.0.0.0/30 (10.0.0.1-10.0.0.2)"},
		{"/24", `{"range":"10.0.0.0/24"}`, []string{"10.0.0.0/24"}, "no free address in range 10.0.0.0/24 (10.0.0.1-10.0.0.254)"},
		{"/32", `{"range":"10.0.0.9/32"}`, []string{"10.0.0.9"}, "no free address in range 10.0.0.9/32 (10.0.0.9-10.0.0.9)"},
		{"gateway and excludes", `{"range":"10.0.0.0/29","gateway":"10.0.0.1","exclude":["10.0.0.4/30"]}`, []string{"10.0.0.2", "10.0.0.3"}, "no free address in range 10.0.0.0/29 (10.0.0.1-10.0.0.6)"},
		{"A-B", `{"range":"10.1.0.10-10.1.0.12/24"}`, []string{"10.1.0.8/29"}, "no free address in range 10.1.0.0/24 (10.1.0.10-10.1.0.12)"},
		{"ipv6 /120 minus half", `{"range":"fd00::/120","exclude":["fd00::80/121"]}`, []string{"fd00::/121"}, "no free address in range fd00::/120 (fd00::1-fd00::ff)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parseRange(t, tt.ipam)
			for _, seed := range []string{"", "a", "pod-uid/net1"} {
				ip, err := Candidate(r, takenSet(t, tt.taken...), seed)
				if !errors.Is(err, ErrExhausted) {
					t.Fatalf("Candidate = %v, %v; want ErrExhausted", ip, err)
				}
				if err.Error() != tt.msg {
					t.Errorf("error\n got %s\nwant %s", err, tt.msg)
				}
			}
		})
	}
}

// The widest range there is: ::/0 without its subnet-router anycast
// address, 2^128-1 usable addresses (the parser refuses it for the
// IPv4-mapped block inside, but the arithmetic must still be exact).
// Candidate relies on New: a range with nothing usable, or a hand-built
// one breaking its invariants, cannot be made (see iprange's TestNew).
func TestCandidateWholeIPv6Space(t *testing.T) {
	all := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("::/0")})
	top := h128(^uint64(0), ^uint64(0)-1) // index 2^128-2: the last address
	got, err := pick(all, nil, top)
	if err != nil || got != all.End() {
		t.Fatalf("pick(all, 2^128-2) = %v, %v; want %v", got, err, all.End())
	}
	got, err = pick(all, func(a netip.Addr) bool { return a == all.End() }, top)
	if err != nil || got != all.Start() {
		t.Fatalf("pick(all, 2^128-2) with end taken = %v, %v; want %v", got, err, all.Start())
	}
	// 2^128-1 is the usable count itself, so it wraps to index 0.
	if got, _ := pick(all, nil, h128(^uint64(0), ^uint64(0))); got != all.Start() {
		t.Fatalf("pick(all, 2^128-1) = %v; want %v", got, all.Start())
	}
}

// Each usable address is offered to taken at most once, excluded addresses
// never, and a fully taken range terminates after exactly that many calls.
func TestCandidateVisitsEachUsableAddressOnce(t *testing.T) {
	r := parseRange(t, `{"range":"10.0.0.0/24","gateway":"10.0.0.100","exclude":["10.0.0.0/28","10.0.0.8/29","10.0.0.200/29","10.0.0.254"]}`)
	for seed := range 50 {
		seen := map[netip.Addr]int{}
		taken := func(a netip.Addr) bool {
			seen[a]++
			if r.Usable(a) != nil {
				t.Fatalf("taken called on unusable %v", a)
			}
			return true
		}
		if _, err := Candidate(r, taken, fmt.Sprint(seed)); !errors.Is(err, ErrExhausted) {
			t.Fatalf("err = %v, want ErrExhausted", err)
		}
		// 254 usable by bounds, minus 15 (.1-.15), gateway, 8 (.200-.207), .254.
		if want := 254 - 15 - 1 - 8 - 1; len(seen) != want {
			t.Fatalf("seed %d: visited %d addresses, want %d", seed, len(seen), want)
		}
		for a, n := range seen {
			if n != 1 {
				t.Fatalf("seed %d: %v visited %d times", seed, a, n)
			}
		}
	}
}

// An exclude of half a /64 must be stepped over, not walked.
func TestCandidateJumpsLargeExclude(t *testing.T) {
	r := parseRange(t, `{"range":"fd00::/64","exclude":["fd00::/65"]}`)
	lowHalf := netip.MustParsePrefix("fd00::/65")
	busy := netip.MustParsePrefix("fd00::8000:0:0:0/120")
	calls := 0
	taken := func(a netip.Addr) bool {
		calls++
		if lowHalf.Contains(a) {
			t.Fatalf("taken called on excluded %v", a)
		}
		return busy.Contains(a) || a == r.End()
	}
	// Start at the (taken) top of the range: the scan wraps, jumps the
	// excluded half, walks the 256 busy addresses and takes the next.
	got, err := pick(r, taken, u(1<<63-1))
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParseAddr("fd00::8000:0:0:100"); got != want || calls != 258 {
		t.Fatalf("pick = %v after %d calls, want %v after 258", got, calls, want)
	}
	for seed := range 200 {
		got, err := Candidate(r, nil, fmt.Sprint(seed))
		if err != nil || lowHalf.Contains(got) {
			t.Fatalf("Candidate = %v, %v", got, err)
		}
	}
}

func TestCandidateDeterministic(t *testing.T) {
	r := parseRange(t, `{"range":"10.10.0.0/16","exclude":["10.10.0.0/20"]}`)
	taken := takenSet(t, "10.10.128.0/18")
	for _, seed := range []string{"", "3f1c6a0e-uid/net1", "3f1c6a0e-uid/net2"} {
		a, err1 := Candidate(r, taken, seed)
		b, err2 := Candidate(r, taken, seed)
		if err1 != nil || err2 != nil || a != b {
			t.Fatalf("seed %q: %v, %v then %v, %v", seed, a, err1, b, err2)
		}
	}
	a, _ := Candidate(r, nil, "3f1c6a0e-uid/net1")
	b, _ := Candidate(r, nil, "3f1c6a0e-uid/net2")
	if a == b {
		t.Errorf("two interfaces of one pod start at the same address %v", a)
	}
}

// Racing agents must not all start at the same address.
func TestCandidateSpreadsSeeds(t *testing.T) {
	tests := []struct {
		name        string
		ipam        string
		minDistinct int
	}{
		// 1000 seeds over 65534 addresses: about 8 collisions expected.
		{"ipv4 /16", `{"range":"10.10.0.0/16"}`, 970},
		{"ipv6 /64", `{"range":"fd00::/64"}`, 1000},
		{"ipv6 /48 minus half", `{"range":"fd00::/48","exclude":["fd00::/49"]}`, 1000},
		// 126 usable addresses: nearly all should be hit by 1000 seeds.
		{"ipv4 /24 minus lower half", `{"range":"10.0.0.0/24","exclude":["10.0.0.0/25"]}`, 120},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parseRange(t, tt.ipam)
			counts := map[netip.Addr]int{}
			for i := range 1000 {
				ip, err := Candidate(r, nil, fmt.Sprintf("pod-%d/net1", i))
				if err != nil {
					t.Fatal(err)
				}
				counts[ip]++
			}
			if len(counts) < tt.minDistinct {
				t.Errorf("%d distinct starting candidates, want >= %d", len(counts), tt.minDistinct)
			}
			// Reducing modulo the usable count (not the bounds) keeps the first
			// address after an exclude from collecting its seeds: ~8 expected.
			if n := counts[r.Start()]; n > 25 {
				t.Errorf("%d of 1000 seeds start at %v", n, r.Start())
			}
		})
	}
}

func TestCandidateNilTaken(t *testing.T) {
	r := parseRange(t, `{"range":"10.0.0.0/24"}`)
	ip, err := Candidate(r, nil, "x")
	if err != nil || r.Usable(ip) != nil {
		t.Fatalf("Candidate = %v, %v", ip, err)
	}
}
