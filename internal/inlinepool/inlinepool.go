// SPDX-License-Identifier: Apache-2.0

// Package inlinepool holds the rules of inline networks' pools: a NAD that
// carries its ranges inline (the whereabouts way) has its network's
// IPPool, named after the network, made from it by ipkeeper-controller.
// The pool is then the network's one definition: every NAD of the network
// must carry the same ranges (Disagreement), and inline networks may not
// overlap (Overlap). The controller applies the rules before it makes a
// pool, so it never makes one it then refuses; the agent applies them,
// reading only, when an ADD comes through a NAD, so the pod learns why.
package inlinepool

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Build returns the IPPool of the inline network cfg describes, as made
// from NAD nad: named after the network (naming.InlinePool), labelled
// inline, with the definition it was made from, the NAD, the network (its
// lock key, ipkeeperv1alpha1.IPPool.LockKey) and ipam.network_name recorded.
func Build(cfg *ipamconfig.Config, nad types.NamespacedName) *ipkeeperv1alpha1.IPPool {
	p := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.InlinePool(cfg.Name),
			Labels: map[string]string{ipkeeperv1alpha1.InlineLabel: "true"},
			Annotations: map[string]string{
				ipkeeperv1alpha1.InlineDefinitionAnnotation: ipamconfig.Definition(cfg.Ranges),
				ipkeeperv1alpha1.DefinedByAnnotation:        "NAD " + nad.String(),
				ipkeeperv1alpha1.InlineNetworkAnnotation:    cfg.Name,
			},
		},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: ipamconfig.SpecRanges(cfg.Ranges)},
	}
	if cfg.NetworkName != "" {
		p.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation] = cfg.NetworkName
	}
	return p
}

// Disagreement is a NAD whose inline ranges differ from its network's
// pool: the definition the pool was made from or, for a pool made by hand,
// its spec.
type Disagreement struct {
	Network string
	Pool    *ipkeeperv1alpha1.IPPool
	// Want is the pool's definition, Got the NAD's (ipamconfig.Definition).
	Want, Got string
}

// CheckDefinition returns the Disagreement of an inline NAD (cfg) with its
// network's pool (whose parsed spec ranges are poolRanges), or nil.
func CheckDefinition(cfg *ipamconfig.Config, pool *ipkeeperv1alpha1.IPPool, poolRanges []iprange.Range) *Disagreement {
	want, inline := pool.Annotations[ipkeeperv1alpha1.InlineDefinitionAnnotation]
	if !inline {
		want = ipamconfig.Definition(poolRanges)
	}
	if got := ipamconfig.Definition(cfg.Ranges); got != want {
		return &Disagreement{Network: cfg.Name, Pool: pool, Want: want, Got: got}
	}
	return nil
}

// Explain renders the disagreement for someone in namespace, who is told
// which NAD the pool was made from only if it is theirs; nad names the
// NAD that disagrees.
func (d *Disagreement) Explain(namespace, nad string) string {
	if !PlanVisibleTo(d.Pool, namespace) {
		return fmt.Sprintf("network %q has one definition, IPPool %q, and the ipam ranges of %s differ from it (%s): "+
			"replace them with \"pool\": %q if this namespace may use that pool (its administrator says), or give this network another \"name\" (see docs/pools.md)",
			d.Network, d.Pool.Name, nad, Describe(d.Got), d.Pool.Name)
	}
	return fmt.Sprintf("network %q has one definition, IPPool %q (%s%s), and the ipam ranges of %s differ from it (%s): "+
		"make the NAD's ranges match the pool's, or replace them with \"pool\": %q (see docs/pools.md)",
		d.Network, d.Pool.Name, Describe(d.Want), DefinedBy(d.Pool, namespace), nad, Describe(d.Got), d.Pool.Name)
}

// Overlap is an inline network whose ranges overlap those of another
// inline network's pool that is as old or older.
type Overlap struct {
	Network string
	// Mine is the network's range, Theirs the other pool's.
	Mine, Theirs iprange.Range
	Other        *ipkeeperv1alpha1.IPPool
}

// Explain renders the overlap for someone in namespace; nad names the
// network's NAD.
func (o *Overlap) Explain(namespace, nad string) string {
	theirs := "range " + o.Theirs.Subnet().String()
	if !PlanVisibleTo(o.Other, namespace) {
		theirs = "a range"
	}
	return fmt.Sprintf("network %q (%s): range %s overlaps %s of IPPool %q (an inline network as old or older%s), so both would hand out the same addresses; "+
		"give the NADs of one L2 network the same \"name\" or set \"pool\" to one IPPool in each, and give separate L2 networks that reuse addresses each its own ipam.network_name (see docs/migrating-from-whereabouts.md)",
		o.Network, nad, o.Mine.Subnet(), theirs, o.Other.Name, DefinedBy(o.Other, namespace))
}

// PlanVisibleTo reports whether a pool's address plan (ranges, gateway,
// excludes) may be told to namespace: a pool that admits every namespace
// hides nothing from any of them, and one made from a NAD of namespace is
// its own; a pool that admits only some namespaces keeps its plan from
// the others, which cannot tell whether it admits them.
func PlanVisibleTo(pool *ipkeeperv1alpha1.IPPool, namespace string) bool {
	ns, ok := definedIn(pool)
	return pool.Spec.NamespaceSelector == nil || (ok && ns == namespace)
}

// definedIn is the namespace of the NAD a pool was made from; false for a
// pool made by hand.
func definedIn(pool *ipkeeperv1alpha1.IPPool) (string, bool) {
	_, obj, _ := strings.Cut(pool.Annotations[ipkeeperv1alpha1.DefinedByAnnotation], " ") // "NAD ns/name"
	ns, _, ok := strings.Cut(obj, "/")
	return ns, ok
}

// FindOverlap judges an inline network (its ranges, its ipam.network_name,
// and its pool, nil when not made yet) against the other pools. Pools of
// other networks that are inline, declare the same network_name and
// overlap it: one as old or older (every one, for a network without a
// pool yet) is returned as the Overlap that refuses the network; younger
// ones' ranges are returned in blocked, for the network not to hand out
// (they may have been made before this network's pool grew into them).
// Pools made within the same second refuse each other: neither can tell
// which came first. rangesOf parses a pool's spec (an invalid pool is
// skipped: its own status says so).
func FindOverlap(network, networkName string, ranges []iprange.Range, pool *ipkeeperv1alpha1.IPPool, pools []ipkeeperv1alpha1.IPPool,
	rangesOf func(*ipkeeperv1alpha1.IPPool) ([]iprange.Range, error)) (blocked []iprange.Range, refused *Overlap) {
	for i := range pools {
		other := &pools[i]
		if (pool != nil && other.Name == pool.Name) || other.Name == naming.InlinePool(network) ||
			other.Labels[ipkeeperv1alpha1.InlineLabel] != "true" ||
			other.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation] != networkName {
			continue
		}
		otherRanges, err := rangesOf(other)
		if err != nil {
			continue
		}
		x, y, ok := ipamconfig.Overlapping(ranges, otherRanges)
		if !ok {
			continue
		}
		if pool != nil && !pool.CreationTimestamp.IsZero() && pool.CreationTimestamp.Time.Before(other.CreationTimestamp.Time) {
			blocked = append(blocked, otherRanges...)
			continue
		}
		return nil, &Overlap{Network: network, Mine: x, Theirs: y, Other: other}
	}
	return blocked, nil
}

// DefinedBy says which NAD a pool was made from, when that NAD is in
// namespace: another tenant's objects are none of its business.
func DefinedBy(pool *ipkeeperv1alpha1.IPPool, namespace string) string {
	by := pool.Annotations[ipkeeperv1alpha1.DefinedByAnnotation]
	if by == "" {
		return ""
	}
	if ns, ok := definedIn(pool); ok && ns == namespace {
		return ", created from " + by
	}
	return ", created from a configuration in another namespace"
}

// Describe renders a canonical definition for people:
// "10.0.0.0/24 10.0.0.1-10.0.0.254 gateway 10.0.0.1 exclude [10.0.0.5/32]".
func Describe(def string) string {
	var ranges []ipkeeperv1alpha1.PoolRange
	if err := json.Unmarshal([]byte(def), &ranges); err != nil {
		return def
	}
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		s := r.Range + " " + r.RangeStart + "-" + r.RangeEnd
		if r.Gateway != "" {
			s += " gateway " + r.Gateway
		}
		if len(r.Exclude) > 0 {
			s += " exclude [" + strings.Join(r.Exclude, ", ") + "]"
		}
		parts[i] = s
	}
	return strings.Join(parts, "; ")
}
