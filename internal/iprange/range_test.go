// SPDX-License-Identifier: Apache-2.0

package iprange_test

import (
	"errors"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

func TestNew(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	tests := []struct {
		name       string
		spec       iprange.Spec
		start, end string
		size       int64
	}{
		{"defaults to the usable bounds", iprange.Spec{Subnet: p("10.0.0.0/24")}, "10.0.0.1", "10.0.0.254", 254},
		{"host bits ignored", iprange.Spec{Subnet: p("10.0.0.77/24")}, "10.0.0.1", "10.0.0.254", 254},
		{"explicit bounds", iprange.Spec{Subnet: p("10.0.0.0/24"), Start: a("10.0.0.10"), End: a("10.0.0.20")}, "10.0.0.10", "10.0.0.20", 11},
		{"/31", iprange.Spec{Subnet: p("10.0.0.4/31")}, "10.0.0.4", "10.0.0.5", 2},
		{"/32", iprange.Spec{Subnet: p("10.0.0.4/32")}, "10.0.0.4", "10.0.0.4", 1},
		{"ipv6 keeps the last address", iprange.Spec{Subnet: p("fd00::/120")}, "fd00::1", "fd00::ff", 255},
		{"/127", iprange.Spec{Subnet: p("fd00::/127")}, "fd00::", "fd00::1", 2},
		{"gateway and excludes counted out", iprange.Spec{Subnet: p("10.0.0.0/24"), Gateway: a("10.0.0.1"),
			Exclude: []netip.Prefix{p("10.0.0.0/28"), p("10.0.0.8/29"), p("10.0.0.250/31")}}, "10.0.0.1", "10.0.0.254", 254 - 15 - 2},
		{"excludes reaching outside the bounds", iprange.Spec{Subnet: p("10.0.0.0/24"), Start: a("10.0.0.10"), End: a("10.0.0.20"),
			Exclude: []netip.Prefix{p("10.0.0.0/29"), p("10.0.0.16/28")}}, "10.0.0.10", "10.0.0.20", 6},
		{"exclude below the bounds", iprange.Spec{Subnet: p("10.0.0.0/24"), Start: a("10.0.0.10"),
			Exclude: []netip.Prefix{p("10.0.0.0/29")}}, "10.0.0.10", "10.0.0.254", 245},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := iprange.New(tt.spec)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if r.Start() != a(tt.start) || r.End() != a(tt.end) {
				t.Errorf("bounds %v-%v, want %s-%s", r.Start(), r.End(), tt.start, tt.end)
			}
			if r.Subnet() != tt.spec.Subnet.Masked() || r.Gateway() != tt.spec.Gateway {
				t.Errorf("subnet %v gateway %v", r.Subnet(), r.Gateway())
			}
			if r.Size().Cmp(big.NewInt(tt.size)) != 0 {
				t.Errorf("Size = %v, want %d", r.Size(), tt.size)
			}
			// Size agrees with the usable check and with Walk.
			n := int64(0)
			for ip := range r.Walk(r.Start()) {
				if err := r.Usable(ip); err != nil {
					t.Fatalf("Walk yields %v: %v", ip, err)
				}
				n++
			}
			if n != tt.size {
				t.Errorf("Walk yields %d addresses, want %d", n, tt.size)
			}
		})
	}
}

// A Range breaking the invariants cannot be made: this is why the
// allocator needs no checks of its own.
func TestNewInvalid(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	v4 := p("10.0.0.0/24")
	tests := []struct {
		name string
		spec iprange.Spec
		msg  string
	}{
		{"zero", iprange.Spec{}, "invalid range: no subnet"},
		{"no subnet", iprange.Spec{Start: a("10.0.0.1"), End: a("10.0.0.9")}, "no subnet"},
		{"start after end", iprange.Spec{Subnet: v4, Start: a("10.0.0.9"), End: a("10.0.0.1")}, "invalid range 10.0.0.0/24: start 10.0.0.9 is after end 10.0.0.1"},
		{"start after the default end", iprange.Spec{Subnet: p("10.0.0.0/30"), Start: a("10.0.0.2"), End: a("10.0.0.1")}, "is after end"},
		{"mixed families", iprange.Spec{Subnet: v4, Start: a("10.0.0.1"), End: a("fd00::1")}, "end fd00::1 is outside the subnet"},
		{"zoned", iprange.Spec{Subnet: p("fe80::/64"), Start: a("fe80::1%eth0"), End: a("fe80::9%eth0")}, "start fe80::1%eth0 has a zone"},
		{"outside subnet", iprange.Spec{Subnet: v4, Start: a("10.0.0.1"), End: a("10.0.1.1")}, "end 10.0.1.1 is outside the subnet"},
		{"network address", iprange.Spec{Subnet: v4, Start: a("10.0.0.0")}, "start 10.0.0.0 is outside the usable addresses 10.0.0.1-10.0.0.254"},
		{"broadcast address", iprange.Spec{Subnet: v4, End: a("10.0.0.255")}, "end 10.0.0.255 is outside the usable addresses"},
		{"ipv6 anycast address", iprange.Spec{Subnet: p("fd00::/64"), Start: a("fd00::")}, "start fd00:: is outside the usable addresses"},
		{"gateway outside", iprange.Spec{Subnet: v4, Gateway: a("10.0.1.1")}, "gateway 10.0.1.1 is outside the subnet"},
		{"gateway of the other family", iprange.Spec{Subnet: v4, Gateway: a("fd00::1")}, "gateway fd00::1 is outside the subnet"},
		{"zoned gateway", iprange.Spec{Subnet: p("fe80::/64"), Gateway: a("fe80::1%eth0")}, "gateway fe80::1%eth0 is outside the subnet"},
		{"exclude of the other family", iprange.Spec{Subnet: v4, Exclude: []netip.Prefix{p("fd00::/64")}}, "exclude fd00::/64 does not overlap the subnet"},
		{"exclude outside", iprange.Spec{Subnet: v4, Exclude: []netip.Prefix{p("10.0.1.0/24")}}, "exclude 10.0.1.0/24 does not overlap"},
		{"zero exclude", iprange.Spec{Subnet: v4, Exclude: []netip.Prefix{{}}}, "exclude invalid Prefix does not overlap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := iprange.New(tt.spec)
			if !errors.Is(err, iprange.ErrInvalid) {
				t.Fatalf("New = %v, %v; want ErrInvalid", r, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			if r.Size().Sign() != 0 {
				t.Errorf("failed New returned a non-empty range %v", r)
			}
		})
	}
}

// When the gateway and excludes leave nothing, New says which entry
// closed the last gap (the parser names its field).
func TestNewEmpty(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	tests := []struct {
		name    string
		spec    iprange.Spec
		exclude int
		alone   bool
		msg     string
	}{
		{"one exclude covers it", iprange.Spec{Subnet: p("10.0.0.0/24"), Exclude: []netip.Prefix{p("10.0.0.0/16")}}, 0, true,
			"invalid range 10.0.0.0/24: exclude 10.0.0.0/16 leaves no usable address"},
		{"gateway and exclude", iprange.Spec{Subnet: p("10.0.0.0/30"), Gateway: a("10.0.0.1"), Exclude: []netip.Prefix{p("10.0.0.2/32")}}, 0, false,
			"exclude 10.0.0.2/32 (together with the other excludes and the gateway) leaves no usable address"},
		{"gateway last", iprange.Spec{Subnet: p("10.0.0.0/30"), Gateway: a("10.0.0.2"), Exclude: []netip.Prefix{p("10.0.0.1/32")}}, -1, false,
			"gateway 10.0.0.2 (together"},
		{"gateway alone", iprange.Spec{Subnet: p("10.0.0.7/32"), Gateway: a("10.0.0.7")}, -1, true, "gateway 10.0.0.7 leaves"},
		{"first of equal starts wins", iprange.Spec{Subnet: p("10.0.0.0/29"), Exclude: []netip.Prefix{p("10.0.0.0/30"), p("10.0.0.4/30"), p("10.0.0.4/31")}}, 1, false, "exclude 10.0.0.4/30"},
		{"ipv6 with host bits in the exclude", iprange.Spec{Subnet: p("fd00::/120"), Exclude: []netip.Prefix{p("fd00::5/64")}}, 0, true, "exclude fd00::/64 leaves"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := iprange.New(tt.spec)
			var e *iprange.EmptyError
			if !errors.As(err, &e) || !errors.Is(err, iprange.ErrInvalid) {
				t.Fatalf("New = %v; want an EmptyError", err)
			}
			if e.Exclude != tt.exclude || e.Alone != tt.alone {
				t.Errorf("EmptyError{Exclude: %d, Alone: %v}, want {%d, %v}", e.Exclude, e.Alone, tt.exclude, tt.alone)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

// A Range cannot be changed through what it hands out.
func TestRangeImmutable(t *testing.T) {
	ex := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/28")}
	r := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Exclude: ex})
	ex[0] = netip.MustParsePrefix("10.0.0.128/25")
	got := r.Excludes()
	got[0] = netip.MustParsePrefix("10.0.0.64/26")
	if want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/28")}; !slices.Equal(r.Excludes(), want) {
		t.Fatalf("Excludes = %v, want %v", r.Excludes(), want)
	}
	if r.Usable(netip.MustParseAddr("10.0.0.5")) == nil || r.Usable(netip.MustParseAddr("10.0.0.200")) != nil {
		t.Fatalf("the usable check changed with the caller's slices")
	}
}

func TestZeroRange(t *testing.T) {
	var r iprange.Range
	if r.Size().Sign() != 0 || r.At([16]byte{}).IsValid() {
		t.Errorf("zero Range: Size %v, At %v", r.Size(), r.At([16]byte{}))
	}
	for ip := range r.Walk(netip.MustParseAddr("10.0.0.1")) {
		t.Fatalf("zero Range yields %v", ip)
	}
	if err := r.Usable(netip.MustParseAddr("10.0.0.1")); !errors.Is(err, iprange.ErrNotUsable) {
		t.Errorf("Usable = %v", err)
	}
}

func TestAtAndWalk(t *testing.T) {
	r := parseRange(t, `{"range":"10.0.0.0/28","gateway":"10.0.0.5","exclude":["10.0.0.8/30"]}`)
	// Usable: .1-.4, .6, .7, .12-.14: nine addresses.
	want := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.6", "10.0.0.7", "10.0.0.12", "10.0.0.13", "10.0.0.14"}
	for i := range 20 {
		var h [16]byte
		h[15] = byte(i)
		if got := r.At(h); got != netip.MustParseAddr(want[i%len(want)]) {
			t.Errorf("At(%d) = %v, want %s", i, got, want[i%len(want)])
		}
	}
	walk := func(from string) []string {
		var out []string
		for a := range r.Walk(netip.MustParseAddr(from)) {
			out = append(out, a.String())
		}
		return out
	}
	for _, tt := range []struct {
		from string
		want []string
	}{
		{"10.0.0.1", want},
		{"10.0.0.6", append(slices.Clone(want[4:]), want[:4]...)},
		{"10.0.0.14", append(slices.Clone(want[8:]), want[:8]...)},
		// Not usable: from the next usable address up.
		{"10.0.0.5", append(slices.Clone(want[4:]), want[:4]...)},
		{"10.0.0.9", append(slices.Clone(want[6:]), want[:6]...)},
		{"10.0.0.15", want},
		{"10.0.0.0", want},
	} {
		if got := walk(tt.from); !slices.Equal(got, tt.want) {
			t.Errorf("Walk(%s) = %v, want %v", tt.from, got, tt.want)
		}
	}
	for a := range r.Walk(netip.MustParseAddr("fd00::1")) {
		t.Fatalf("Walk from another family yields %v", a)
	}
	// Stopping early stops.
	n := 0
	for range r.Walk(r.Start()) {
		n++
		if n == 3 {
			break
		}
	}
}

func TestLastAddrAndUsableBounds(t *testing.T) {
	tests := []struct {
		prefix, last, first, usableLast string
	}{
		{"10.0.0.0/24", "10.0.0.255", "10.0.0.1", "10.0.0.254"},
		{"10.0.0.77/24", "10.0.0.255", "10.0.0.1", "10.0.0.254"},
		{"10.0.0.4/30", "10.0.0.7", "10.0.0.5", "10.0.0.6"},
		{"10.0.0.4/31", "10.0.0.5", "10.0.0.4", "10.0.0.5"},
		{"10.0.0.4/32", "10.0.0.4", "10.0.0.4", "10.0.0.4"},
		{"0.0.0.0/0", "255.255.255.255", "0.0.0.1", "255.255.255.254"},
		{"fd00::/64", "fd00::ffff:ffff:ffff:ffff", "fd00::1", "fd00::ffff:ffff:ffff:ffff"},
		{"fd00::/127", "fd00::1", "fd00::", "fd00::1"},
		{"fd00::7/128", "fd00::7", "fd00::7", "fd00::7"},
		{"::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	}
	for _, tt := range tests {
		p := netip.MustParsePrefix(tt.prefix)
		if got := iprange.LastAddr(p); got != netip.MustParseAddr(tt.last) {
			t.Errorf("LastAddr(%s) = %v, want %s", p, got, tt.last)
		}
		first, last := iprange.UsableBounds(p)
		if first != netip.MustParseAddr(tt.first) || last != netip.MustParseAddr(tt.usableLast) {
			t.Errorf("UsableBounds(%s) = %v, %v, want %s, %s", p, first, last, tt.first, tt.usableLast)
		}
	}
}
