// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The invariants:
//
//	I1 no address is in two successful, not-yet-deleted attachments of
//	   different holders (the pods of one claim share the claim's);
//	I2 every successful attachment's address has a reservation that
//	   belongs to it (owner pod UID + interface, or its claim) until its
//	   DEL; a repeated ADD returns the same address, a CHECK passes (a
//	   VM launcher's ADD that waited while ipkeeper-controller made its
//	   claim again belongs to the new claim: claimOfADD);
//	I3 at quiescence, after the GC grace period, no reservation without a
//	   live owner (a pod attachment the harness holds, or an existing claim)
//	   but a released one, and that only until its spec.reuseAfter, which
//	   is never further out than its pool's cooldown or a VM's retention;
//	I4 a claim's status.ips equals the addresses of its reservations, and
//	   its pods get exactly those; a launcher's ADD is refused with code 7
//	   (a recorded address not the claim's) only for a claim the harness
//	   edited. Allowed, listed, never violations, are the transient states
//	   of ipkeeper-controller: reservations of a claim that records none
//	   yet (made before the status write, or a request's address reserved
//	   while the rest of the request cannot be), reservations the claim
//	   holds beyond what it records (a create whose answer was lost,
//	   released once seen), and, after the harness's edit, the old
//	   addresses still held while a new one is not reserved yet (or someone
//	   else holds it). At quiescence only the last (someone else holding
//	   the new address) and the first (for a claim whose request is
//	   refused) may remain, and a filled claim carries its MAC label
//	   (ipkeeper.io/mac, written after the fill, in a lane of its own);
//	I5 no panic in any process log, and every failed request returned a
//	   CNI error with a code (never a transport error while the agent is up;
//	   a request the harness itself gave up on, its context ended, is not
//	   judged);
//	I6 ipkeeper-controller is the one writer of claims' addresses: a
//	   claim's recorded addresses never change once recorded except by the
//	   harness's own edit; a claim filled while asking for given addresses
//	   records them, or, if its request asks for other addresses rather
//	   than wait (requested-addresses-fallback) and ipkeeper-controller
//	   says one was held (TakenOtherAddressesGiven), none of them; at quiescence every claim records addresses unless its
//	   request is refused because another holds an address it asks for; no
//	   agent writes a claim, a claim's reservation or a block of IPAMClaims
//	   (no ipkeeper-agent field manager, an empty spec.node), and only
//	   claims' reservations carry the claims-block label;
//	I7 every reservation's name is the one lock key of its pool and
//	   address (naming.Reservation of IPPool.LockKey and spec.ip): no
//	   writer names one otherwise, so no address can be held twice under
//	   two names; and every reservation is in exactly one watch scope
//	   (ipkeeper.io/node of its node or Shared, or ipkeeper.io/claims-block
//	   for a claim's: watchScopeProblem);
//	I8 at quiescence, no object exists that no NAD, user or node caused:
//	   every pool is the harness's named pool or the inline pool of a NAD
//	   the harness made and ipkeeper accepted (never one of a refused
//	   definition), every block's pool exists and a node block's node
//	   exists, every IPAMClaim and Cluster API claim is the harness's;
//	I9 (long runs) one maker of claims: a VM started while ipam-extensions makes the
//	   claims (after the controller said so) has a claim ipam-extensions
//	   made and ipkeeper neither made nor adopted (makerops.go);
//	I10 a VM restored over itself from a snapshot keeps its claims (the
//	   same objects, the same addresses); a clone shares no claim and no
//	   address with its source, a VM restored after its source was
//	   deleted no claim; a deleted VM with a retention
//	   (ipkeeper.io/retain-addresses-for) has each of its released claims'
//	   addresses retired, not freed, until its deletion plus the
//	   retention, and restored under its name, none still retired for
//	   a deleted claim while the restored claim of that network holds
//	   others (vmcopyops.go); a VM moved to another namespace has its
//	   addresses lent to the receiver's claims while both launchers run,
//	   then theirs, or, the move failed, its own again (vmmoveops.go);
//	I11 no MAC held twice: no two live interfaces of one network, of
//	   different holders, have one MAC (the checker's VMs that set their
//	   own MAC set distinct ones), and a VM that sets its interface's MAC
//	   has it in every launcher's networks annotation element, never
//	   ipkeeper's; the runtime passes an element's mac as CNI_ARGS MAC, as
//	   Multus does, and counts where each came from (mac:of-address,
//	   mac:own, mac:other);
//	I12 at quiescence, every VM asking for its guest network configuration
//	   (ipkeeper.io/guest-network-config) whose claims all record addresses
//	   has its Secret, listing exactly its ipkeeper networks, each with its
//	   claim's addresses and MAC; and a running VM's claim's GuestAddresses
//	   condition tells what its guest reports (the simulated virt-handler
//	   reports what each launcher interface got): True exactly when an
//	   interface reports the claim's addresses (guestops.go). During the
//	   run, a VM seen running is watched briefly until its configuration
//	   matches and one claim says True with its guest reporting exactly
//	   those addresses (observeGuest): coverage only, since at quiescence
//	   no VM may be running;
//	I13 sticky by MAC: a pod of the sticky_mac network whose ADD succeeded
//	   at its first try, within the cooldown of the successful DEL of the
//	   last attachment presenting its MAC (counted from an earlier DEL of
//	   it that failed: its write may have been done; not a DEL racing its pod's next
//	   sandbox, which may rightly release nothing), gets that attachment's address
//	   back, on whichever node (or another holder took it in the moment
//	   the take-back frees it: counted, and judged by I1); at quiescence
//	   only the sticky network's pods' reservations are labelled with a
//	   MAC, one they present (stickyops.go);
//	I14 at quiescence, every pool's status counts its reservations: it
//	   observed the pool's generation, its used and out-of-range counts
//	   add up to the distinct addresses its reservations hold, and no more
//	   cool down than are used (ipkeeper-controller writes a change of
//	   counts alone up to 10 s late; poolchecks.go);
//	I15 per-namespace quotas: after every successful allocation in the
//	   shared pool (spec.maxAddressesPerNamespace smallQuota, set from its
//	   creation), the run's namespace's live attachments there hold no
//	   more addresses than the quota; at quiescence no namespace holds
//	   more reservations of a pool than its quota, released ones included
//	   (poolchecks.go).
//
// I1, I13 and I15 are checked on every successful ADD against the harness's record; I2,
// I4 and I6 continuously from live reads, judging only holders no
// operation of the harness is changing; everything again at quiescence.

// maxDetailed is how many violations of one class are printed in full.
const maxDetailed = 3

type violation struct {
	inv, class, msg, history, objects string
	at                                time.Time
}

// violations collects what the checks find.
type violations struct {
	mu      sync.Mutex
	list    []violation
	seen    map[string]bool
	byClass map[string]int
	hist    *history
	// harness errors: the harness itself could not do its job (an API
	// write it retried for minutes); the run is void.
	harness []error
}

func (v *violations) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.list)
}

// violate records a violation of invariant inv, of a kind (class), with
// the history around it and the objects named by keys (pod names,
// sandbox IDs, claim names). The same message is recorded once: a
// continuous check sees a lasting violation every round.
func (r *runner) violate(inv, class, msg string, keys ...string) {
	v := violation{inv: inv, class: inv + "/" + class, msg: msg, at: time.Now()}
	r.viol.mu.Lock()
	if r.viol.seen == nil {
		r.viol.seen, r.viol.byClass = map[string]bool{}, map[string]int{}
	}
	if r.viol.seen[inv+msg] {
		r.viol.mu.Unlock()
		return
	}
	r.viol.seen[inv+msg] = true
	r.viol.byClass[v.class]++
	detailed := r.viol.byClass[v.class] <= maxDetailed
	r.viol.mu.Unlock()
	r.counts.inc("violation:" + v.class)
	if detailed {
		v.history = r.hist.dump(25, keys...)
		v.objects = r.objectsOf(keys)
	}
	r.viol.mu.Lock()
	r.viol.list = append(r.viol.list, v)
	r.viol.mu.Unlock()
}

func (r *runner) harnessError(err error) {
	r.viol.mu.Lock()
	defer r.viol.mu.Unlock()
	r.viol.harness = append(r.viol.harness, err)
}

// objectsOf renders, best effort, the pods, claims and reservations that
// keys name.
func (r *runner) objectsOf(keys []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := r.c.cp.Client
	var b strings.Builder
	var res ipkv1alpha1.IPReservationList
	if err := c.List(ctx, &res); err != nil {
		fmt.Fprintf(&b, "  (listing reservations: %v)\n", err)
	}
	printed := map[string]bool{}
	for _, k := range keys {
		if k == "" {
			continue
		}
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: k}, &pod); err == nil {
			fmt.Fprintf(&b, "  pod %s: uid=%s node=%s networks=%s\n", k, pod.UID, pod.Spec.NodeName, pod.Annotations[multus.Annotation])
		}
		var claim ipamclaimsv1alpha1.IPAMClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: k}, &claim); err == nil {
			fmt.Fprintf(&b, "  claim %s: uid=%s status=%s\n", k, claim.UID, mustJSON(claim.Status))
		}
		for _, rv := range res.Items {
			if (rv.Name == k || rv.Spec.Owner.Name == k || rv.Spec.ContainerID == k) && !printed[rv.Name] {
				printed[rv.Name] = true
				fmt.Fprintf(&b, "  reservation %s (uid %s, rv %s): %s\n", rv.Name, rv.UID, rv.ResourceVersion, mustJSON(rv.Spec))
			}
		}
	}
	return b.String()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// belongs reports whether reservation res is the one attachment a holds.
func belongs(res *ipkv1alpha1.IPReservation, a *attachment) bool {
	o := res.Spec.Owner
	if res.Spec.Network != a.network || res.Spec.Released() {
		return false
	}
	if a.claimName != "" {
		// Its claim's, or lent to its claim, or (lent from a source's)
		// the source claim's, or (a source's launcher, not DELed yet after
		// a successful handover) passed to the claim it was lent to.
		return reservation.ClaimMayUse(res, a.claimUID) ||
			(a.lentFrom != "" && o.Kind == ipkv1alpha1.OwnerIPAMClaim && o.UID == a.lentFrom) ||
			(a.lentTo != "" && o.Kind == ipkv1alpha1.OwnerIPAMClaim && o.UID == a.lentTo)
	}
	if a.capi {
		return o.Kind == ipkv1alpha1.OwnerIPAddressClaim && o.UID == a.podUID
	}
	return o.Kind == ipkv1alpha1.OwnerPod && o.UID == a.podUID && res.Spec.InterfaceName == a.ifName
}

// live is what the API server holds, read in one go.
type liveState struct {
	res    map[string]*ipkv1alpha1.IPReservation
	claims []ipamclaimsv1alpha1.IPAMClaim
	pods   map[types.UID]bool
	pools  map[string]*ipkv1alpha1.IPPool
	capi   map[types.UID]bool // Cluster API claims
	// vmClaims are the claims of the VMs (vmops.go), which the
	// controller makes; I4 and I6's claim rules judge the harness's own.
	vmClaims []ipamclaimsv1alpha1.IPAMClaim
}

func (r *runner) readLive(ctx context.Context) (*liveState, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := r.c.cp.Client
	// Claims first, reservations last: ipkeeper-controller reserves a
	// claim's addresses before it records them, so every address a claim
	// read here records is in the reservations read after it (read the
	// other way round, a claim filled in between would record addresses
	// the older list lacks).
	// Pools before reservations too: a reservation's pool exists before
	// it (pools are never deleted here).
	var pools ipkv1alpha1.IPPoolList
	if err := c.List(ctx, &pools); err != nil {
		return nil, err
	}
	var claims, vmClaims ipamclaimsv1alpha1.IPAMClaimList
	if err := c.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for _, ns := range []string{vmNamespace, vmRecvNamespace} {
		var l ipamclaimsv1alpha1.IPAMClaimList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		vmClaims.Items = append(vmClaims.Items, l.Items...)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var capiClaims ipamv1.IPAddressClaimList
	if err := c.List(ctx, &capiClaims, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var res ipkv1alpha1.IPReservationList
	if err := c.List(ctx, &res); err != nil {
		return nil, err
	}
	ls := &liveState{res: map[string]*ipkv1alpha1.IPReservation{}, claims: claims.Items, pods: map[types.UID]bool{},
		pools: map[string]*ipkv1alpha1.IPPool{}, capi: capiOwners(&capiClaims), vmClaims: vmClaims.Items}
	for i := range pools.Items {
		ls.pools[pools.Items[i].Name] = &pools.Items[i]
	}
	for i := range res.Items {
		ls.res[res.Items[i].Name] = &res.Items[i]
	}
	for _, p := range pods.Items {
		ls.pods[p.UID] = true
	}
	return ls, nil
}

// checkContinuously runs checkOnce every interval until ctx ends.
func (r *runner) checkContinuously(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.checkOnce(ctx, false)
		}
	}
}

// checkOnce checks I2 and I4 against live reads. Only holders that no
// operation touched between the snapshot and the re-check are judged.
// final adds the quiescence-only rules.
func (r *runner) checkOnce(ctx context.Context, final bool) {
	quiet := r.model.quietLive()
	gens := r.model.generations()
	ls, err := r.readLive(ctx)
	if err != nil {
		r.counts.inc("check:skipped-api-down")
		return
	}
	// I2: each quiet live attachment's addresses are reserved for it.
	for _, q := range quiet {
		a := q.att
		for _, ip := range r.model.ipsOf(a) {
			r.counts.inc("check:I2")
			name := naming.Reservation(a.key, ip)
			res, ok := ls.res[name]
			if ok && belongs(res, a) {
				continue
			}
			if !r.model.stillQuiet(q) {
				continue
			}
			what, class := "no reservation", "no-reservation"
			if ok {
				class = "reservation-of-another"
				what = fmt.Sprintf("reservation %s belongs to %s %s/%s (uid %s) interface %q sandbox %s",
					name, res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, res.Spec.Owner.UID, res.Spec.InterfaceName, res.Spec.ContainerID)
			}
			r.violate("I2", class, fmt.Sprintf("live attachment %s: address %s has %s", r.model.describe(a), ip, what),
				a.podName, a.containerID, a.claimName, name)
		}
	}
	// I4 and I6, claim by claim; I6's writers, object by object.
	for i := range ls.claims {
		r.checkClaim(ls, &ls.claims[i], gens, final)
	}
	r.checkWriters(ls)
	r.checkLockKeys(ls)
	if final {
		r.checkOwners(ls)
		r.checkBlocks(ctx)
		r.checkCaused(ctx, ls)
		r.checkGuestConfigs(ctx)
		r.checkStickyLabels(ls)
	}
}

// waitPoolsSettled waits, after the final checks, for every pool's
// status to count its reservations (I14): a change of counts alone is
// written up to poolstatus.DefaultUsageInterval late. It comes last so
// that the other final checks see the cluster as soon as it settles, as
// they always have.
func (r *runner) waitPoolsSettled(ctx context.Context, timeout time.Duration) {
	_ = framework.Eventually(ctx, timeout, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		ls, err := r.readLive(ctx)
		if err != nil {
			return false, err
		}
		return poolsSettled(ls), nil
	})
}

// orphans returns the reservations whose owner (the pod or the claim, by
// UID) no longer exists: after the GC grace period there must be none
// (I3). leaked lists reservations of live pods that none of the pod's
// live attachments holds; overdue, released reservations whose owner is
// alive but whose cooldown ended more than a GC round ago (the controller
// deletes them at spec.reuseAfter).
func (r *runner) orphans(ls *liveState) (gone, leaked, overdue []*ipkv1alpha1.IPReservation) {
	claims := map[types.UID]bool{}
	for _, c := range slices.Concat(ls.claims, ls.vmClaims) {
		claims[c.UID] = true
	}
	held := map[string]bool{} // reservation names live attachments hold
	for _, a := range r.model.live() {
		for _, ip := range r.model.ipsOf(a) {
			held[naming.Reservation(a.key, ip)] = true
		}
	}
	names := make([]string, 0, len(ls.res))
	for n := range ls.res {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		res := ls.res[n]
		if res.Spec.Released() {
			// Released: it belongs to nobody (a claim of its name excepted)
			// until spec.reuseAfter, which no cooldown or retention of the
			// run puts further out than maxHold.
			if left := time.Until(res.Spec.ReuseAfter.Time); -left > cooldownGrace || left > maxHold(res.Spec.Pool) {
				overdue = append(overdue, res)
			}
			continue
		}
		switch res.Spec.Owner.Kind {
		case ipkv1alpha1.OwnerIPAMClaim:
			if !claims[res.Spec.Owner.UID] {
				gone = append(gone, res)
			}
		case ipkv1alpha1.OwnerIPAddressClaim:
			if !ls.capi[res.Spec.Owner.UID] {
				gone = append(gone, res)
			}
		default:
			switch {
			case !ls.pods[res.Spec.Owner.UID]:
				gone = append(gone, res)
			case !held[n] && !res.Spec.Released():
				leaked = append(leaked, res)
			}
		}
	}
	return gone, leaked, overdue
}

// maxHold is the furthest spec.reuseAfter of a reservation of pool
// released now: its pool's cooldown or a VM's retention (vmRetention),
// whichever is longer, rounded up to the second.
func maxHold(pool string) time.Duration {
	return max(cooldownOf(pool), vmRetention) + time.Second
}

// cooldownGrace is how long past its spec.reuseAfter a released
// reservation may still exist at quiescence: the controller deletes it
// then, retrying with backoff after the faults of the run.
const cooldownGrace = 45 * time.Second

// checkOwners reports I3 violations (at quiescence only).
func (r *runner) checkOwners(ls *liveState) {
	gone, leaked, overdue := r.orphans(ls)
	r.counts.add("check:I3", len(ls.res))
	for _, res := range overdue {
		if left := time.Until(res.Spec.ReuseAfter.Time); left > 0 {
			r.violate("I3", "held-too-long", fmt.Sprintf("released reservation %s (%s %s) holds its address for %s more (reuseAfter %s): longer than any cooldown or retention of the run",
				res.Name, res.Spec.Network, res.Spec.IP, left.Round(time.Second), res.Spec.ReuseAfter.Format("15:04:05")),
				res.Spec.Owner.Name, res.Spec.ContainerID)
			continue
		}
		r.violate("I3", "cooldown-over-still-held", fmt.Sprintf("released reservation %s (%s %s) still holds the address %s after its cooldown ended (reuseAfter %s)",
			res.Name, res.Spec.Network, res.Spec.IP, time.Since(res.Spec.ReuseAfter.Time).Round(time.Second), res.Spec.ReuseAfter.Format("15:04:05")),
			res.Spec.Owner.Name, res.Spec.ContainerID)
	}
	for _, res := range gone {
		r.violate("I3", "owner-gone", fmt.Sprintf("reservation %s (%s %s) outlived its owner %s %s/%s (uid %s) past the GC grace period",
			res.Name, res.Spec.Network, res.Spec.IP, res.Spec.Owner.Kind, res.Spec.Owner.Namespace, res.Spec.Owner.Name, res.Spec.Owner.UID),
			res.Spec.Owner.Name, res.Spec.ContainerID)
	}
	// Not a violation: a failed ADD may leave a reservation of its pod
	// (its outcome unknown to the agent) that the pod's next sandbox
	// adopts, or the garbage collector releases once the pod is gone.
	for _, res := range leaked {
		r.counts.inc("unused-reservations-of-live-pods")
		r.unused = append(r.unused, fmt.Sprintf("%s %s of %s/%s sandbox %s", res.Spec.Network, res.Spec.IP, res.Spec.Owner.Namespace, res.Spec.Owner.Name, res.Spec.ContainerID))
	}
}

// waitSettled waits, after quiescence, for the controller's garbage
// collector to release the reservations of deleted pods and claims, and
// for its claim controller to settle every claim (filled, holding what
// it records, or refused for someone else's address).
func (r *runner) waitSettled(ctx context.Context, timeout time.Duration) {
	_ = framework.Eventually(ctx, timeout, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		ls, err := r.readLive(ctx)
		if err != nil {
			return false, err
		}
		gone, _, overdue := r.orphans(ls)
		return len(gone) == 0 && len(overdue) == 0 && r.claimsSettled(ls), nil
	})
}

func claimIPs(status []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range status {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Addr())
		} else if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

func sameSet(a, b []netip.Addr) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, netip.Addr.Compare)
	slices.SortFunc(y, netip.Addr.Compare)
	return slices.Equal(x, y)
}
