// SPDX-License-Identifier: Apache-2.0

package inlinepool

import (
	"errors"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// parse returns the configuration of a NAD's network, failing the test
// when it does not parse.
func parse(t *testing.T, conf string) *ipamconfig.Config {
	t.Helper()
	cfg, err := ipamconfig.Parse([]byte(conf))
	if err != nil {
		t.Fatalf("parsing %s: %v", conf, err)
	}
	return cfg
}

// inline is the IPPool of an inline network, made from NAD
// team-<network>/<network>, created at created, with the given
// ipam.network_name.
func inline(t *testing.T, network, networkName string, created time.Time, ranges ...string) *ipkeeperv1alpha1.IPPool {
	t.Helper()
	var rs []iprange.Range
	for _, r := range ranges {
		rs = append(rs, iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix(r)}))
	}
	p := Build(&ipamconfig.Config{Name: network, NetworkName: networkName, Ranges: rs}, types.NamespacedName{Namespace: "team-" + network, Name: network})
	p.CreationTimestamp = metav1.NewTime(created)
	return p
}

func ranges(t *testing.T, p *ipkeeperv1alpha1.IPPool) []iprange.Range {
	t.Helper()
	rs, err := rangesOf(p)
	if err != nil {
		t.Fatalf("ranges of IPPool %s: %v", p.Name, err)
	}
	return rs
}

// A pool built from a NAD says what it was made from, and names its
// reservations after the network even when the pool name is a hash.
func TestBuild(t *testing.T) {
	nad := types.NamespacedName{Namespace: "ns", Name: "blue-nad"}
	for _, tt := range []struct {
		name, conf string
		wantPool   string
		wantNetKey string // the network_name annotation, "" for none
	}{
		{name: "object name", conf: `{"name":"blue","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","gateway":"10.0.0.1"}}`, wantPool: "blue"},
		{name: "hashed name", conf: `{"name":"Blue_Net","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`, wantPool: naming.InlinePool("Blue_Net")},
		{name: "network_name recorded", conf: `{"name":"blue","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","network_name":"l2-a"}}`,
			wantPool: "blue", wantNetKey: "l2-a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parse(t, tt.conf)
			p := Build(cfg, nad)
			if p.Name != tt.wantPool || p.Name != cfg.PoolName() {
				t.Errorf("name = %q, want %q (the network's PoolName %q)", p.Name, tt.wantPool, cfg.PoolName())
			}
			if p.Labels[ipkeeperv1alpha1.InlineLabel] != "true" {
				t.Errorf("labels = %v, want %s=true", p.Labels, ipkeeperv1alpha1.InlineLabel)
			}
			want := map[string]string{
				ipkeeperv1alpha1.InlineDefinitionAnnotation: ipamconfig.Definition(cfg.Ranges),
				ipkeeperv1alpha1.DefinedByAnnotation:        "NAD ns/blue-nad",
				ipkeeperv1alpha1.InlineNetworkAnnotation:    cfg.Name,
			}
			if tt.wantNetKey != "" {
				want[ipkeeperv1alpha1.NetworkNameAnnotation] = tt.wantNetKey
			}
			if !maps.Equal(p.Annotations, want) {
				t.Errorf("annotations = %v, want %v", p.Annotations, want)
			}
			// An inline pool's reservations are named from its network:
			// the pool's lock key must be the network's name.
			if p.LockKey() != cfg.Name {
				t.Errorf("LockKey = %q, want the network name %q", p.LockKey(), cfg.Name)
			}
			// The spec parses back to the definition it records, so the
			// NAD it was made from agrees with it.
			if got := ipamconfig.Definition(ranges(t, p)); got != want[ipkeeperv1alpha1.InlineDefinitionAnnotation] {
				t.Errorf("spec definition %s, recorded %s", got, want[ipkeeperv1alpha1.InlineDefinitionAnnotation])
			}
			if d := CheckDefinition(cfg, p, ranges(t, p)); d != nil {
				t.Errorf("the NAD a pool was built from disagrees with it: %+v", d)
			}
		})
	}
}

// NADs agree with an inline pool when their ranges hand out the same
// addresses however written; a pool made by hand is compared by its spec,
// an inline one by the definition it was made from (its spec may grow).
func TestCheckDefinition(t *testing.T) {
	const (
		short    = `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.10-10.0.0.20/24","gateway":"10.0.0.1"}}`
		long     = `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20","gateway":"10.0.0.1"}}`
		otherGW  = `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20","gateway":"10.0.0.254"}}`
		wider    = `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","gateway":"10.0.0.1"}}`
		excluded = `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.10-10.0.0.20/24","gateway":"10.0.0.1","exclude":["10.0.0.12/32"]}}`
	)
	made := func(conf string) *ipkeeperv1alpha1.IPPool {
		return Build(parse(t, conf), types.NamespacedName{Namespace: "ns", Name: "first"})
	}
	byHand := func(pr ...ipkeeperv1alpha1.PoolRange) *ipkeeperv1alpha1.IPPool {
		return &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: pr}}
	}
	grown := made(short)
	grown.Spec.Ranges = append(grown.Spec.Ranges, ipkeeperv1alpha1.PoolRange{Range: "10.0.1.0/24"})
	for _, tt := range []struct {
		name     string
		pool     *ipkeeperv1alpha1.IPPool
		nad      string
		disagree bool
	}{
		{name: "same writing", pool: made(short), nad: short},
		{name: "written differently", pool: made(short), nad: long},
		{name: "other gateway", pool: made(short), nad: otherGW, disagree: true},
		{name: "wider range", pool: made(short), nad: wider, disagree: true},
		{name: "an exclude more", pool: made(short), nad: excluded, disagree: true},
		{name: "inline pool grown since: its definition counts", pool: grown, nad: long},
		{name: "by hand, same spec", pool: byHand(ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24", RangeStart: "10.0.0.10", RangeEnd: "10.0.0.20", Gateway: "10.0.0.1"}), nad: short},
		{name: "by hand, other spec", pool: byHand(ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24", Gateway: "10.0.0.1"}), nad: short, disagree: true},
		{name: "by hand, matches the wider NAD", pool: byHand(ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24", Gateway: "10.0.0.1"}), nad: wider},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parse(t, tt.nad)
			d := CheckDefinition(cfg, tt.pool, ranges(t, tt.pool))
			if (d != nil) != tt.disagree {
				t.Fatalf("CheckDefinition = %+v, want disagreement %v", d, tt.disagree)
			}
			if d == nil {
				return
			}
			if d.Network != "n" || d.Pool != tt.pool || d.Got != ipamconfig.Definition(cfg.Ranges) || d.Want == d.Got {
				t.Errorf("disagreement = %+v; want network n, the pool, the NAD's definition as Got and another as Want", d)
			}
		})
	}
}

// The message of a disagreement names the pool's NAD only to its own
// namespace, and always the NAD that disagrees (the reader's own).
func TestDisagreementExplain(t *testing.T) {
	pool := Build(parse(t, `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`), types.NamespacedName{Namespace: "tenant-a", Name: "first"})
	cfg := parse(t, `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.1.0/24"}}`)
	d := CheckDefinition(cfg, pool, ranges(t, pool))
	if d == nil {
		t.Fatal("different ranges agree")
	}
	for _, tt := range []struct {
		namespace string
		want      []string
		not       []string
	}{
		{namespace: "tenant-a", want: []string{"created from NAD tenant-a/first", "NAD tenant-a/second", "10.0.0.0/24", "10.0.1.0/24"}},
		{namespace: "tenant-b", want: []string{"created from a configuration in another namespace", "NAD tenant-b/second"}, not: []string{"tenant-a", "first"}},
	} {
		msg := d.Explain(tt.namespace, "NAD "+tt.namespace+"/second")
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("in %s: %q lacks %q", tt.namespace, msg, w)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(msg, n) {
				t.Errorf("in %s: %q names %q, another namespace's", tt.namespace, msg, n)
			}
		}
	}
}

// Inline networks with the same network_name may not overlap: the older
// pool (every pool, for a network without one yet) refuses the other,
// whose younger ranges the older pool must not hand out.
func TestFindOverlap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	older, younger := t0.Add(-time.Hour), t0.Add(time.Hour)
	mine := inline(t, "mine", "", t0, "10.0.0.0/24")
	handMade := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", CreationTimestamp: metav1.NewTime(older)},
		Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}}},
	}
	invalid := inline(t, "broken", "", older, "10.0.0.0/24")
	invalid.Spec.Ranges[0].Range = "10.0.0.0/33"
	sameName := inline(t, "mine", "", older, "10.0.0.0/24")
	sameName.Name = "mine" // the network's own pool, as listed
	for _, tt := range []struct {
		name        string
		networkName string
		pool        *ipkeeperv1alpha1.IPPool // nil: the network has none yet
		others      []*ipkeeperv1alpha1.IPPool
		refusedBy   string // the Overlap's pool, "" for none
		blocked     []string
	}{
		{name: "no pool yet: an overlapping pool refuses", others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", younger, "10.0.0.128/25")}, refusedBy: "other"},
		{name: "no pool yet: disjoint", others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", older, "10.0.1.0/24")}},
		{name: "no pool yet: other family", others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", older, "fd00::/64")}},
		{name: "older pool refuses", pool: mine, others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", older, "10.0.0.0/25")}, refusedBy: "other"},
		{name: "younger pool is blocked", pool: mine, others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", younger, "10.0.0.0/25", "fd00::/64")},
			blocked: []string{"10.0.0.0/25", "fd00::/64"}},
		// Creation times have a resolution of a second: neither can tell
		// which came first.
		{name: "same second refuses", pool: mine, others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", t0, "10.0.0.0/25")}, refusedBy: "other"},
		{name: "different network_name never overlaps", pool: mine, others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "l2-b", older, "10.0.0.0/24")}},
		{name: "different network_name, no pool yet", networkName: "l2-a", others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "", older, "10.0.0.0/24")}},
		{name: "same network_name overlaps", networkName: "l2-a", others: []*ipkeeperv1alpha1.IPPool{inline(t, "other", "l2-a", older, "10.0.0.0/24")}, refusedBy: "other"},
		{name: "non-inline pools are ignored", others: []*ipkeeperv1alpha1.IPPool{handMade}},
		{name: "an invalid pool is skipped", others: []*ipkeeperv1alpha1.IPPool{invalid}},
		{name: "the network's own pool is skipped", others: []*ipkeeperv1alpha1.IPPool{sameName}},
		{name: "an older one refuses past a younger one", pool: mine,
			others: []*ipkeeperv1alpha1.IPPool{inline(t, "young", "", younger, "10.0.0.0/26"), inline(t, "old", "", older, "10.0.0.64/26")}, refusedBy: "old"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pools := make([]ipkeeperv1alpha1.IPPool, 0, len(tt.others)+1)
			if tt.pool != nil {
				pools = append(pools, *tt.pool) // a list holds the pool itself too
			}
			for _, o := range tt.others {
				pools = append(pools, *o)
			}
			myRanges := []iprange.Range{iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/24")})}
			blocked, refused := FindOverlap("mine", tt.networkName, myRanges, tt.pool, pools, rangesOf)
			switch {
			case tt.refusedBy == "" && refused != nil:
				t.Fatalf("refused by %s (%s overlaps %s)", refused.Other.Name, refused.Mine, refused.Theirs)
			case tt.refusedBy != "" && (refused == nil || refused.Other.Name != tt.refusedBy):
				t.Fatalf("refused = %+v, want refused by %s", refused, tt.refusedBy)
			case refused != nil && (refused.Network != "mine" || !refused.Mine.Contains(refused.Theirs.Start())):
				t.Errorf("overlap = %+v: want network mine and the overlapping ranges", refused)
			}
			var got []string
			for _, r := range blocked {
				got = append(got, r.Subnet().String())
			}
			if strings.Join(got, " ") != strings.Join(tt.blocked, " ") {
				t.Errorf("blocked = %v, want %v", got, tt.blocked)
			}
		})
	}
}

// The overlap message names the other network's NAD only to its namespace.
func TestOverlapExplain(t *testing.T) {
	other := inline(t, "other", "", time.Unix(0, 0), "10.0.0.0/24") // made from NAD team-other/other
	_, refused := FindOverlap("mine", "", []iprange.Range{iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/25")})}, nil,
		[]ipkeeperv1alpha1.IPPool{*other}, rangesOf)
	if refused == nil {
		t.Fatal("overlapping networks not refused")
	}
	own := refused.Explain("team-other", "NAD team-other/mine")
	if !strings.Contains(own, "created from NAD team-other/other") || !strings.Contains(own, `IPPool "other"`) {
		t.Errorf("to the other network's namespace: %q lacks its NAD", own)
	}
	foreign := refused.Explain("team-mine", "NAD team-mine/mine")
	if strings.Contains(foreign, "team-other") || !strings.Contains(foreign, "created from a configuration in another namespace") {
		t.Errorf("to another namespace: %q", foreign)
	}
	for _, w := range []string{"10.0.0.0/25", "10.0.0.0/24", "NAD team-mine/mine", `network "mine"`} {
		if !strings.Contains(foreign, w) {
			t.Errorf("%q lacks %q", foreign, w)
		}
	}
}

func TestDefinedBy(t *testing.T) {
	for _, tt := range []struct {
		by, namespace, want string
	}{
		{by: "NAD ns/a", namespace: "ns", want: ", created from NAD ns/a"},
		{by: "NAD ns/a", namespace: "other", want: ", created from a configuration in another namespace"},
		// A namespace whose name the other's begins with is another one.
		{by: "NAD ns-2/a", namespace: "ns", want: ", created from a configuration in another namespace"},
		{by: "NAD ns/a", namespace: "ns-2", want: ", created from a configuration in another namespace"},
		// Pools an older agent made record the pod.
		{by: "pod ns/p (args.cni)", namespace: "ns", want: ", created from pod ns/p (args.cni)"},
		{by: "garbage", namespace: "", want: ", created from a configuration in another namespace"},
		{by: "", namespace: "ns", want: ""},
	} {
		p := &ipkeeperv1alpha1.IPPool{}
		if tt.by != "" {
			p.Annotations = map[string]string{ipkeeperv1alpha1.DefinedByAnnotation: tt.by}
		}
		if got := DefinedBy(p, tt.namespace); got != tt.want {
			t.Errorf("DefinedBy(%q, %q) = %q, want %q", tt.by, tt.namespace, got, tt.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	cfg := parse(t, `{"name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","gateway":"10.0.0.1","exclude":["10.0.0.5/32"],
		"ipRanges":[{"range":"fd00::/120"}]}}`)
	want := "10.0.0.0/24 10.0.0.1-10.0.0.254 gateway 10.0.0.1 exclude [10.0.0.5/32]; fd00::/120 fd00::1-fd00::ff"
	if got := Describe(ipamconfig.Definition(cfg.Ranges)); got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	// Something that is not a definition is shown as it is.
	if got := Describe("not json"); got != "not json" {
		t.Errorf("Describe(not json) = %q", got)
	}
}

func TestNetwork(t *testing.T) {
	nad := func(conf string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nad"}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: conf}}
	}
	for _, tt := range []struct {
		name, conf string
		found      bool
		network    string
		errPart    string
	}{
		{name: "ipkeeper", conf: `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`, found: true, network: "blue"},
		{name: "in a plugin list", conf: `{"cniVersion":"1.0.0","name":"red","plugins":[{"type":"tuning"},{"type":"bridge","ipam":{"type":"ipkeeper","pool":"shared"}}]}`,
			found: true, network: "red"},
		{name: "another IPAM", conf: `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"whereabouts","range":"10.0.0.0/24"}}`},
		{name: "invalid ipkeeper configuration", conf: `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/33"}}`,
			found: true, errPart: "NetworkAttachmentDefinition ns/nad"},
		{name: "not JSON", conf: `{`, errPart: "spec.config"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, found, err := Network(nad(tt.conf))
			if found != tt.found {
				t.Errorf("found = %v, want %v", found, tt.found)
			}
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("error = %v, want one mentioning %q", err, tt.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.found && cfg.Name != tt.network {
				t.Errorf("network = %q, want %q", cfg.Name, tt.network)
			}
		})
	}
}

// rangesOf is what the controller parses pools with: an invalid pool is
// an error naming the field, which FindOverlap skips.
func TestRangesOfNamesTheField(t *testing.T) {
	p := &ipkeeperv1alpha1.IPPool{Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/33"}}}}
	_, err := rangesOf(p)
	var fe *ipamconfig.FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "spec.ranges[0].range") {
		t.Errorf("error = %v, want a FieldError naming spec.ranges[0].range", err)
	}
}

// A pool that admits only some namespaces keeps its address plan from the
// others: a NAD of any namespace that names its network is told that the
// definitions differ, not what the pool's ranges, gateway and excludes are
// (issue 53, item 4).
func TestExplainKeepsARestrictedPoolsPlanFromOtherNamespaces(t *testing.T) {
	admin := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-db"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{
			Ranges:            []ipkeeperv1alpha1.PoolRange{{Range: "10.9.0.0/24", Gateway: "10.9.0.1", Exclude: []string{"10.9.0.5/32"}}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "prod"}},
		},
	}
	secret := []string{"10.9.0.0/24", "10.9.0.1", "10.9.0.5"}
	cfg := parse(t, `{"name":"prod-db","ipam":{"type":"ipkeeper","range":"10.9.1.0/24"}}`)
	d := CheckDefinition(cfg, admin, ranges(t, admin))
	if d == nil {
		t.Fatal("different ranges agree")
	}
	msg := d.Explain("evil", "NAD evil/x")
	for _, s := range secret {
		if strings.Contains(msg, s) {
			t.Errorf("the disagreement told to namespace evil names %s of IPPool prod-db's plan: %q", s, msg)
		}
	}
	for _, w := range []string{`IPPool "prod-db"`, "10.9.1.0/24", "NAD evil/x"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q lacks %q", msg, w)
		}
	}

	other := inline(t, "other", "", time.Unix(0, 0), "10.0.0.0/24")
	other.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "other"}}
	_, refused := FindOverlap("mine", "", []iprange.Range{iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/25")})}, nil,
		[]ipkeeperv1alpha1.IPPool{*other}, rangesOf)
	if refused == nil {
		t.Fatal("overlapping networks not refused")
	}
	if foreign := refused.Explain("team-mine", "NAD team-mine/mine"); strings.Contains(foreign, "10.0.0.0/24") || !strings.Contains(foreign, "10.0.0.0/25") {
		t.Errorf("the overlap told to namespace team-mine names IPPool other's range, or not its own: %q", foreign)
	}
	if own := refused.Explain("team-other", "NAD team-other/mine"); !strings.Contains(own, "10.0.0.0/24") {
		t.Errorf("the overlap told to the pool's own namespace lacks its range: %q", own)
	}
}
