// SPDX-License-Identifier: Apache-2.0

package poolstatus

import (
	"fmt"
	"math/big"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// IP family names as the status spells them.
const (
	familyIPv4 = "IPv4"
	familyIPv6 = "IPv6"
)

func familyOf(r iprange.Range) string {
	if r.Is4() {
		return familyIPv4
	}
	return familyIPv6
}

// usage is one PoolUsage before rendering, with an exact size.
type usage struct {
	size *big.Int
	used int64
}

func (u usage) free() *big.Int {
	f := new(big.Int).Sub(u.size, big.NewInt(u.used))
	if f.Sign() < 0 {
		// Cannot happen (each usable address is counted once), but a
		// negative free count would help nobody.
		f.SetInt64(0)
	}
	return f
}

func (u usage) render() v1alpha1.PoolUsage {
	return v1alpha1.PoolUsage{Size: u.size.String(), Used: u.used, Free: u.free().String()}
}

// familyUsage is the usage of one family, for conditions and status.
type familyUsage struct {
	family string
	usage
}

// desiredStatus is the status pool should have given its parsed ranges (or
// the error parsing them) and the count of its reservations. Conditions
// start from the current ones so unchanged ones keep their transition time.
func desiredStatus(pool *v1alpha1.IPPool, ranges []iprange.Range, specErr error, c reservationindex.Count) v1alpha1.IPPoolStatus {
	st := v1alpha1.IPPoolStatus{
		ObservedGeneration: pool.Generation,
		OutOfRange:         c.OutOfRange,
		CoolingDown:        c.CoolingDown,
		Networks:           c.Networks,
		Namespaces:         poolquota.Report(c.Namespaces),
		Conditions:         append([]metav1.Condition(nil), pool.Status.Conditions...),
	}
	if len(st.Networks) == 0 {
		st.Networks = nil
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: pool.Generation,
		})
	}
	if pool.DeletionTimestamp != nil {
		cond(v1alpha1.PoolDeleting, metav1.ConditionTrue, v1alpha1.PoolReasonReservationsLeft, deletingMessage(pool.Name, c))
	}
	if specErr != nil {
		// No range can hand anything out: size 0, every held address out of range.
		st.Size, st.Free = "0", "0"
		cond(v1alpha1.PoolReady, metav1.ConditionFalse, v1alpha1.PoolReasonInvalidSpec, specErr.Error())
		msg := "the spec is invalid; see the Ready condition"
		cond(v1alpha1.PoolExhausted, metav1.ConditionUnknown, v1alpha1.PoolReasonInvalidSpec, msg)
		cond(v1alpha1.PoolNearlyExhausted, metav1.ConditionUnknown, v1alpha1.PoolReasonInvalidSpec, msg)
		return st
	}

	total := usage{size: new(big.Int)}
	var families []familyUsage
	for i, r := range ranges {
		ru := usage{size: r.Size(), used: c.Used[i]}
		st.Ranges = append(st.Ranges, v1alpha1.RangeUsage{Range: pool.Spec.Ranges[i].Range, PoolUsage: ru.render()})
		total.size.Add(total.size, ru.size)
		total.used += ru.used
		fam := familyOf(r)
		j := 0
		for j < len(families) && families[j].family != fam {
			j++
		}
		if j == len(families) {
			families = append(families, familyUsage{family: fam, usage: usage{size: new(big.Int)}})
		}
		families[j].size.Add(families[j].size, ru.size)
		families[j].used += ru.used
	}
	// IPv4 before IPv6, whatever order the ranges come in.
	if len(families) == 2 && families[0].family == familyIPv6 {
		families[0], families[1] = families[1], families[0]
	}
	for _, f := range families {
		st.Families = append(st.Families, v1alpha1.FamilyUsage{Family: f.family, PoolUsage: f.render()})
	}
	tu := total.render()
	st.Size, st.Used, st.Free = tu.Size, tu.Used, tu.Free

	cond(v1alpha1.PoolReady, metav1.ConditionTrue, v1alpha1.PoolReasonValid, fmt.Sprintf("the ranges are valid and hold %s addresses", st.Size))
	threshold := int64(v1alpha1.DefaultWarningThresholdPercent)
	if p := pool.Spec.WarningThresholdPercent; p != nil {
		threshold = int64(*p)
	}
	var exhausted, nearly []string
	for _, f := range families {
		if f.free().Sign() == 0 {
			exhausted = append(exhausted, fmt.Sprintf("%s: all %s addresses used", f.family, f.size))
		}
		// used*100 >= threshold*size, exactly for any size.
		lhs := new(big.Int).Mul(big.NewInt(f.used), big.NewInt(100))
		rhs := new(big.Int).Mul(f.size, big.NewInt(threshold))
		if lhs.Cmp(rhs) >= 0 {
			pct := new(big.Int).Quo(lhs, f.size)
			nearly = append(nearly, fmt.Sprintf("%s: %d of %s addresses used (%s%%)", f.family, f.used, f.size, pct))
		}
	}
	if len(exhausted) > 0 {
		cond(v1alpha1.PoolExhausted, metav1.ConditionTrue, v1alpha1.PoolReasonNoneFree, strings.Join(exhausted, "; "))
	} else {
		cond(v1alpha1.PoolExhausted, metav1.ConditionFalse, v1alpha1.PoolReasonFree, "every IP family has a free address")
	}
	if len(c.HeldGateways) > 0 {
		gws := make([]string, len(c.HeldGateways))
		for i, gw := range c.HeldGateways {
			gws[i] = gw.String()
		}
		cond(v1alpha1.PoolGatewayInUse, metav1.ConditionTrue, v1alpha1.PoolReasonGatewayHeld, fmt.Sprintf(
			"gateway %s is held by a reservation: the workload there is every other one's gateway; move the gateway, or give that workload another address (kubectl ipkeeper who-has %s --pool %s)",
			strings.Join(gws, ", "), gws[0], pool.Name))
	} else {
		cond(v1alpha1.PoolGatewayInUse, metav1.ConditionFalse, v1alpha1.PoolReasonGatewaysFree, "no gateway is held by a reservation")
	}
	if len(nearly) > 0 {
		cond(v1alpha1.PoolNearlyExhausted, metav1.ConditionTrue, v1alpha1.PoolReasonAboveWarning,
			fmt.Sprintf("%s; the warning threshold is %d%%", strings.Join(nearly, "; "), threshold))
	} else {
		cond(v1alpha1.PoolNearlyExhausted, metav1.ConditionFalse, v1alpha1.PoolReasonBelowWarning,
			fmt.Sprintf("usage is below the warning threshold of %d%% in every IP family", threshold))
	}
	return st
}

// crossing is an Event to record because a condition changed.
type crossing struct {
	warning         bool
	reason, message string
}

// crossings compares the Exhausted, NearlyExhausted and GatewayInUse
// conditions before and after a status write: entering one is a Warning,
// leaving it a Normal event. Unknown (invalid spec) is neither entering
// nor leaving. Deleting becoming True is a Normal event.
func crossings(before, after []metav1.Condition) []crossing {
	var out []crossing
	for _, typ := range []string{v1alpha1.PoolNearlyExhausted, v1alpha1.PoolExhausted, v1alpha1.PoolGatewayInUse} {
		was, is := meta.FindStatusCondition(before, typ), meta.FindStatusCondition(after, typ)
		if is == nil {
			continue
		}
		wasTrue := was != nil && was.Status == metav1.ConditionTrue
		switch {
		case is.Status == metav1.ConditionTrue && !wasTrue:
			out = append(out, crossing{warning: true, reason: typ, message: is.Message})
		case is.Status == metav1.ConditionFalse && wasTrue:
			out = append(out, crossing{reason: is.Reason, message: is.Message})
		}
	}
	// A deletion that waits is the administrator's own doing: told once,
	// as a Normal event.
	if is := meta.FindStatusCondition(after, v1alpha1.PoolDeleting); is != nil && is.Status == metav1.ConditionTrue &&
		!meta.IsStatusConditionTrue(before, v1alpha1.PoolDeleting) {
		out = append(out, crossing{reason: is.Reason, message: is.Message})
	}
	return out
}

// countsOnly reports whether next differs from cur only in what every
// allocation and release changes: the used, free, out-of-range and
// cooling-down counts, and the messages of conditions that quote them.
// Everything else (the generation observed, size, ranges, families,
// networks, each condition's status and reason) is the same.
func countsOnly(cur, next *v1alpha1.IPPoolStatus) bool {
	if cur.ObservedGeneration != next.ObservedGeneration || cur.Size != next.Size ||
		!slices.Equal(cur.Networks, next.Networks) ||
		len(cur.Ranges) != len(next.Ranges) || len(cur.Families) != len(next.Families) ||
		len(cur.Conditions) != len(next.Conditions) {
		return false
	}
	for i := range cur.Ranges {
		if cur.Ranges[i].Range != next.Ranges[i].Range || cur.Ranges[i].Size != next.Ranges[i].Size {
			return false
		}
	}
	for i := range cur.Families {
		if cur.Families[i].Family != next.Families[i].Family || cur.Families[i].Size != next.Families[i].Size {
			return false
		}
	}
	for _, c := range next.Conditions {
		was := meta.FindStatusCondition(cur.Conditions, c.Type)
		if was == nil || was.Status != c.Status || was.Reason != c.Reason || was.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}
