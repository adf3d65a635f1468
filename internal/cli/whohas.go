// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var whoHasCommand = command{
	name:     "who-has",
	synopsis: "IP [--network NETWORK | --pool POOL] [-n NAMESPACE] [-o FORMAT]",
	summary:  "Show which pod or claim (and the VM behind it) holds an address. Exits 1 when nobody does.",
	formats:  formats(outputWide, outputJSON, outputYAML),
	args: func(args []string) error {
		_, err := holderIP(args)
		return err
	},
	setup: func(fs *pflag.FlagSet) runFunc {
		o := &whoHasOptions{}
		fs.StringVar(&o.network, "network", "", "only reservations of this CNI network")
		fs.StringVar(&o.pool, "pool", "", "only reservations of this IPPool")
		return o.run
	},
}

type whoHasOptions struct{ network, pool string }

// Holder is one reservation of the address, joined with its owner.
type Holder struct {
	Reservation string                            `json:"reservation"`
	Pool        string                            `json:"pool"`
	Network     string                            `json:"network"`
	IP          string                            `json:"ip"`
	Owner       ipkeeperv1alpha1.ReservationOwner `json:"owner"`
	// VM is the VirtualMachine (or VMI) behind an IPAMClaim owner.
	VM          string     `json:"vm,omitempty"`
	OwnerExists *bool      `json:"ownerExists,omitempty"`
	Node        string     `json:"node,omitempty"`
	Interface   string     `json:"interface,omitempty"`
	ContainerID string     `json:"containerID,omitempty"`
	Created     time.Time  `json:"created"`
	ReuseAfter  *time.Time `json:"reuseAfter,omitempty"`
	// PoolExists is false for a reservation whose IPPool no longer
	// exists (deleted before ipkeeper kept pools in use, or its finalizer
	// removed by hand): nothing hands its address out or cools it down.
	PoolExists bool   `json:"poolExists"`
	State      string `json:"state"`
}

// holderIP is who-has' argument: one IP address without zone.
func holderIP(args []string) (netip.Addr, error) {
	if len(args) != 1 {
		return netip.Addr{}, usageErrorf("who-has takes one IP address, got %d arguments", len(args))
	}
	ip, err := netip.ParseAddr(args[0])
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, usageErrorf("IP %q: not an IP address without zone", args[0])
	}
	return ip.Unmap(), nil
}

func (o *whoHasOptions) run(ctx context.Context, s *session, args []string) error {
	ip, err := holderIP(args)
	if err != nil {
		return err
	}
	if o.network != "" && o.pool != "" {
		return usageErrorf("--network and --pool exclude each other")
	}
	// All of them: the address held outside the filters is worth saying.
	all, err := listReservations(ctx, s.client, "")
	if err != nil {
		return err
	}
	var pools ipkeeperv1alpha1.IPPoolList
	if err := s.client.List(ctx, &pools); err != nil {
		return fmt.Errorf("listing IPPools: %w", err)
	}
	poolByName := map[string]*ipkeeperv1alpha1.IPPool{}
	for i := range pools.Items {
		poolByName[pools.Items[i].Name] = &pools.Items[i]
	}
	now := s.now()
	var holders []Holder
	elsewhere := 0
	for i := range all {
		r := &all[i]
		got, err := netip.ParseAddr(r.Spec.IP)
		if err != nil || got.Unmap() != ip {
			continue
		}
		if (o.network != "" && r.Spec.Network != o.network) || (o.pool != "" && r.Spec.Pool != o.pool) ||
			(s.namespaceSet && r.Spec.Owner.Namespace != s.namespace) {
			elsewhere++
			continue
		}
		h := Holder{
			Reservation: r.Name, Pool: r.Spec.Pool, Network: r.Spec.Network, IP: r.Spec.IP, Owner: r.Spec.Owner,
			Node: r.Spec.Node, Interface: r.Spec.InterfaceName, ContainerID: r.Spec.ContainerID,
			Created: r.CreationTimestamp.Time, State: reservationState(&r.Spec, now),
		}
		if r.Spec.ReuseAfter != nil {
			t := r.Spec.ReuseAfter.Time
			h.ReuseAfter = &t
		}
		exists, known, err := ownerExists(ctx, s.client, r.Spec.Owner)
		if err != nil {
			return err
		}
		if known {
			h.OwnerExists = &exists
			if !exists && !r.Spec.Released() {
				h.State = "held, but the owner is gone (see kubectl ipkeeper leaks)"
			}
		}
		if r.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
			if h.VM, err = vmBehindClaim(ctx, s.client, r.Spec.Owner); err != nil {
				return err
			}
		}
		pool, ok := poolByName[r.Spec.Pool]
		h.PoolExists = ok
		switch {
		case !ok:
			h.State += fmt.Sprintf("; IPPool %s no longer exists", r.Spec.Pool)
		case pool.DeletionTimestamp != nil:
			h.State += fmt.Sprintf("; IPPool %s is being deleted, and waits for its reservations to go", r.Spec.Pool)
		}
		holders = append(holders, h)
	}
	if len(holders) == 0 {
		return o.notHeld(s, pools.Items, ip, elsewhere)
	}
	return s.print(printable{doc: holders, names: reservationNames(holders, func(h Holder) string { return h.Reservation }),
		table: func(w io.Writer, wide bool) error { return holdersTable(w, holders, now, wide) }})
}

// holdersTable is who-has' table (wide: with the reservation, the owner's
// UID and the container ID).
func holdersTable(w io.Writer, holders []Holder, now time.Time, wide bool) error {
	header := []string{"IP", "POOL", "NETWORK", "OWNER", "VM", "NODE", "INTERFACE", "AGE", "STATE"}
	if wide {
		header = append(header, "RESERVATION", "OWNER-UID", "CONTAINER-ID")
	}
	t := newTable(w, header...)
	for _, h := range holders {
		row := []string{h.IP, h.Pool, h.Network, ownerString(h.Owner), h.VM, h.Node, h.Interface, age(now, h.Created), h.State}
		if wide {
			row = append(row, h.Reservation, string(h.Owner.UID), h.ContainerID)
		}
		t.row(row...)
	}
	return t.flush()
}

// notHeld explains an address nobody holds: free in the pool that covers
// it, not handed out there (and why), or in no pool at all.
func (o *whoHasOptions) notHeld(s *session, pools []ipkeeperv1alpha1.IPPool, ip netip.Addr, elsewhere int) error {
	scope := ""
	if o.network != "" {
		scope = fmt.Sprintf(" on network %q", o.network)
	}
	if o.pool != "" {
		scope = fmt.Sprintf(" in IPPool %q", o.pool)
	}
	if s.namespaceSet {
		scope += fmt.Sprintf(" for an owner in namespace %s", s.namespace)
	}
	if elsewhere > 0 {
		return &notFoundError{fmt.Sprintf("no reservation holds %s%s; %d reservation(s) of it exist elsewhere: drop -n, --network or --pool to see them", ip, scope, elsewhere)}
	}
	for i := range pools {
		p := &pools[i]
		if o.pool != "" && p.Name != o.pool {
			continue
		}
		if o.network != "" && !slices.Contains(p.Status.Networks, o.network) && p.Name != o.network {
			continue
		}
		ranges, err := ipamconfig.PoolRanges(&p.Spec)
		if err != nil {
			continue // an invalid pool hands out nothing; its status says why
		}
		for _, r := range ranges {
			if !r.Contains(ip) {
				continue
			}
			if err := r.Usable(ip); err != nil {
				return &notFoundError{fmt.Sprintf("no reservation holds %s%s; IPPool %s covers it but does not hand it out: %v", ip, scope, p.Name, err)}
			}
			return &notFoundError{fmt.Sprintf("no reservation holds %s%s: it is free in IPPool %s, range %s", ip, scope, p.Name, r)}
		}
	}
	return &notFoundError{fmt.Sprintf("no reservation holds %s%s, and no IPPool covers it", ip, scope)}
}

// notFoundError is an object (here: a holder) that is not there: exit 1,
// as kubectl get exits on NotFound.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }
