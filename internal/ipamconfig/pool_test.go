// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestPoolReference(t *testing.T) {
	cfg, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"ipkeeper","pool":"blue"},"runtimeConfig":{"ips":["10.0.0.7"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pool != "blue" || cfg.PoolName() != "blue" || len(cfg.Ranges) != 0 {
		t.Errorf("pool %q, PoolName %q, ranges %v; want blue, blue, none", cfg.Pool, cfg.PoolName(), cfg.Ranges)
	}
	if len(cfg.StaticIPs) != 1 || cfg.StaticIPs[0].String() != "10.0.0.7/32" {
		t.Errorf("static IPs %v, want [10.0.0.7/32] (the pool's range sets the length later)", cfg.StaticIPs)
	}
	inline, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if inline.PoolName() != "net1" {
		t.Errorf("inline PoolName = %q, want the network name", inline.PoolName())
	}
	for _, tt := range []struct{ ipam, field string }{
		{`"pool":"Blue_1"`, "ipam.pool"},
		{`"pool":"blue","range":"10.0.0.0/24"`, "ipam.range"},
		{`"pool":"blue","gateway":"10.0.0.1"`, "ipam.gateway"},
		{`"pool":"blue","exclude":["10.0.0.1/32"]`, "ipam.exclude"},
		{`"pool":"blue","ipRanges":[{"range":"fd00::/64"}]`, "ipam.ipRanges"},
	} {
		_, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"ipkeeper",` + tt.ipam + `}}`))
		var fe *FieldError
		if err == nil || !asField(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: error %v, want a FieldError for %s", tt.ipam, err, tt.field)
		}
	}
}

func asField(err error, fe **FieldError) bool {
	return errors.As(err, fe)
}

func TestPoolRanges(t *testing.T) {
	spec := &v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{
		{Range: "10.0.0.0/24", Gateway: "10.0.0.1", Exclude: []string{"10.0.0.2"}},
		{Range: "10.0.1.0/24"},
		{Range: "fd00::/64"},
	}}
	rs, err := PoolRanges(spec)
	if err != nil || len(rs) != 3 {
		t.Fatalf("PoolRanges = %v, %v; want three ranges (two IPv4 ones are fine in a pool)", rs, err)
	}
	for _, tt := range []struct {
		ranges []v1alpha1.PoolRange
		field  string
		text   string
	}{
		{nil, "spec.ranges", "at least one"},
		{[]v1alpha1.PoolRange{{Range: "10.0.0.0/33"}}, "spec.ranges[0].range", "10.0.0.0/33"},
		{[]v1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "10.0.0.128/25"}}, "spec.ranges[1].range", "overlaps spec.ranges[0]"},
		{[]v1alpha1.PoolRange{{Range: "10.0.0.0/24", RangeStart: "10.0.1.5"}}, "spec.ranges[0].range_start", "10.0.1.5"},
		{[]v1alpha1.PoolRange{{Range: "10.0.0.0/24", Exclude: []string{"x"}}}, "spec.ranges[0].exclude[0]", `"x"`},
	} {
		_, err := PoolRanges(&v1alpha1.IPPoolSpec{Ranges: tt.ranges})
		var fe *FieldError
		if err == nil || !asField(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("%v: error %v, want field %s mentioning %s", tt.ranges, err, tt.field, tt.text)
		}
	}
	// A reuseCooldown stored before its validation rule existed.
	_, err = PoolRanges(&v1alpha1.IPPoolSpec{Ranges: spec.Ranges, ReuseCooldown: &v1alpha1.Duration{Invalid: "30 seconds"}})
	var fe *FieldError
	if err == nil || !asField(err, &fe) || fe.Field != "spec.reuseCooldown" || !strings.Contains(err.Error(), `"30 seconds"`) {
		t.Errorf("malformed reuseCooldown: error %v, want field spec.reuseCooldown naming the value", err)
	}
	// Two writings of one range have one definition.
	a, _ := Parse([]byte(`{"name":"n","ipam":{"range":"10.0.0.10-10.0.0.20/24","gateway":"10.0.0.1"}}`))
	b, _ := Parse([]byte(`{"name":"n","ipam":{"range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20","gateway":"10.0.0.1"}}`))
	c, _ := Parse([]byte(`{"name":"n","ipam":{"range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20","gateway":"10.0.0.254"}}`))
	if Definition(a.Ranges) != Definition(b.Ranges) {
		t.Errorf("equal ranges, different definitions:\n%s\n%s", Definition(a.Ranges), Definition(b.Ranges))
	}
	if Definition(a.Ranges) == Definition(c.Ranges) {
		t.Errorf("different gateways, one definition %s", Definition(a.Ranges))
	}
	back, err := PoolRanges(&v1alpha1.IPPoolSpec{Ranges: SpecRanges(a.Ranges)})
	if err != nil || Definition(back) != Definition(a.Ranges) {
		t.Errorf("SpecRanges does not round-trip: %v %v", back, err)
	}
	if _, _, ok := Overlapping(a.Ranges, rs); !ok {
		t.Errorf("10.0.0.10-20 and 10.0.0.0/24 must overlap")
	}
}
