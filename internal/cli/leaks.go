// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/pflag"

	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var leaksCommand = command{
	name:     "leaks",
	synopsis: "[-n NAMESPACE | -A] [-o FORMAT]",
	summary:  "List reservations whose owner is gone (and released ones still cooling down), with their age.",
	formats:  formats(outputWide, outputJSON, outputYAML),
	setup:    func(*pflag.FlagSet) runFunc { return runLeaks },
	args:     noArgs("leaks"),
}

// Leak states.
const (
	// stateLeaked: the owner (that UID) is gone and the reservation is not
	// released, or its cooldown is over and it is not deleted yet.
	stateLeaked = "leaked"
	// stateCooling: released by its owner, holding the address for
	// nobody until reuseAfter; expected, not a leak.
	stateCooling = "cooling"
)

// Leak is a reservation no owner holds.
type Leak struct {
	Reservation string                            `json:"reservation"`
	Pool        string                            `json:"pool"`
	Network     string                            `json:"network"`
	IP          string                            `json:"ip"`
	Owner       ipkeeperv1alpha1.ReservationOwner `json:"owner"`
	State       string                            `json:"state"`
	Created     time.Time                         `json:"created"`
	ReuseAfter  *time.Time                        `json:"reuseAfter,omitempty"`
	// Detail says what the garbage collector does with it.
	Detail string `json:"detail"`
}

func runLeaks(ctx context.Context, s *session, _ []string) error {
	ns := s.ownerNamespace()
	all, err := listReservations(ctx, s.client, ns)
	if err != nil {
		return err
	}
	owners, err := loadOwners(ctx, s.client, ns)
	if err != nil {
		return err
	}
	now := s.now()
	var leaks []Leak
	unknown := map[ipkeeperv1alpha1.OwnerKind]int{}
	for i := range all {
		r := &all[i]
		l := Leak{Reservation: r.Name, Pool: r.Spec.Pool, Network: r.Spec.Network, IP: r.Spec.IP, Owner: r.Spec.Owner, Created: r.CreationTimestamp.Time}
		if left, released := reservation.Left(&r.Spec, now); released {
			t := r.Spec.ReuseAfter.Time
			l.ReuseAfter = &t
			if left > 0 {
				l.State, l.Detail = stateCooling, fmt.Sprintf("released; reusable in %s", left.Round(time.Second))
			} else {
				l.State, l.Detail = stateLeaked, fmt.Sprintf("released; cooldown over %s ago but not deleted: the GC deletes it when the cooldown ends; is ipkeeper-controller running?", age(now, t))
			}
			leaks = append(leaks, l)
			continue
		}
		exists, known := owners.exists(r.Spec.Owner)
		if !known {
			unknown[r.Spec.Owner.Kind]++
			continue
		}
		if exists {
			continue
		}
		l.State, l.Detail = stateLeaked, gcRule(r.Spec.Owner.Kind)
		leaks = append(leaks, l)
	}
	sort.SliceStable(leaks, func(i, j int) bool { return leaks[i].Created.Before(leaks[j].Created) })
	for kind, n := range unknown {
		fmt.Fprintf(s.errOut, "%d reservations owned by %ss were not checked: the API server does not serve that kind.\n", n, kind)
	}
	if len(leaks) == 0 && s.output.isTable() {
		fmt.Fprintln(s.errOut, "No leaked or cooling reservations found.")
		return nil
	}
	if leaks == nil {
		leaks = []Leak{}
	}
	return s.print(printable{doc: leaks, names: reservationNames(leaks, func(l Leak) string { return l.Reservation }),
		table: func(w io.Writer, wide bool) error { return leaksTable(w, leaks, now, wide) }})
}

// leaksTable is leaks' table (wide: with the network, the owner's UID and
// what the GC does).
func leaksTable(w io.Writer, leaks []Leak, now time.Time, wide bool) error {
	header := []string{"RESERVATION", "POOL", "IP", "OWNER", "STATE", "AGE"}
	if wide {
		header = append(header, "NETWORK", "OWNER-UID", "DETAIL")
	}
	t := newTable(w, header...)
	for _, l := range leaks {
		row := []string{l.Reservation, l.Pool, l.IP, ownerString(l.Owner), l.State, age(now, l.Created)}
		if wide {
			row = append(row, l.Network, string(l.Owner.UID), l.Detail)
		}
		t.row(row...)
	}
	return t.flush()
}

// gcRule says when the garbage collector (internal/controller/reservationgc) releases the
// reservation of a gone owner of kind.
func gcRule(kind ipkeeperv1alpha1.OwnerKind) string {
	switch kind {
	case ipkeeperv1alpha1.OwnerPod:
		return "pod gone; the GC releases it once the pod has been gone for --gc-grace-period (default 2m) and the reservation is at least that old"
	case ipkeeperv1alpha1.OwnerIPAMClaim:
		return "IPAMClaim gone; the GC releases it at once: is ipkeeper-controller running?"
	default:
		return string(kind) + " gone; the GC releases it at once: is ipkeeper-controller running with Cluster API support?"
	}
}
