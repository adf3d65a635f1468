// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// slot is a place for one pod at a time, on a fixed node and network. A
// kubelet handles one pod's sandboxes one after another, so operations
// on a slot are serialized (mu), except late DELs of old sandboxes and
// GC, which race them on purpose.
type slot struct {
	mu     sync.Mutex
	pool   string
	idx    int
	node   *node
	net    *network
	static string // requested address of a static-IP slot
	mac    string // the MAC a sticky slot's pods present (stickyMAC)

	gen     int
	pod     *corev1.Pod
	cur     *attachment   // current sandbox
	pending []*attachment // sandboxes whose DEL has not succeeded yet

	oldMu sync.Mutex
	old   []*attachment // earlier sandboxes of the current pod, for late DELs
}

// claimSlot is one IPAMClaim and its pods (a VM's launcher pods).
type claimSlot struct {
	mu   sync.Mutex
	idx  int
	name string
	uid  types.UID
	pods []*claimPod
	ips  []netip.Addr // what the claim's pods last got
	// pending are sandboxes whose DEL has not succeeded yet.
	pending []*attachment
}

type claimPod struct {
	pod  *corev1.Pod
	node *node
	att  *attachment
}

// runner executes the schedule.
type runner struct {
	c      *cluster
	model  *model
	hist   *history
	counts *counters
	viol   *violations

	slots  map[string][]*slot
	claims []*claimSlot
	capi   []*capiSlot

	// poolMu serializes edits of the shared pool; pool is its shape.
	poolMu sync.Mutex
	pool   poolShape
	// refused are the pools of the definitions ipkeeper must refuse that
	// the harness made (pool name to NAD): none may ever exist (I8).
	refusedMu sync.Mutex
	refused   map[string]string
	badSeq    atomic.Int64 // bad NADs made so far
	// vms are the VMs' launcher attachments; vmErrs the last error of each
	// failed VM operation kind, for the summary.
	vms vmPods
	kv  *framework.KubeVirt // the VMs' KubeVirt (vmops.go)
	// longVMs: a long run starts virt-controller again when it exits and
	// runs the claims maker turns (makerops.go).
	longVMs bool
	// makerChangedAt is when ipam-extensions was last installed or
	// removed (UnixNano): the agents' view of the webhook settles
	// makerSettle later (agentsDerive).
	makerChangedAt atomic.Int64
	// makerExternal: ipam-extensions is installed (it makes the VMs'
	// claims, and takes no part in a move's handover).
	makerExternal atomic.Bool
	vmErrs        sync.Map
	vmNames       sync.Map // every VM name the run used
	// ownMACs are the MACs VMs set themselves (blue's macAddress), by VM
	// name: KubeVirt passes them, ipkeeper never replaces them (I11).
	ownMACs sync.Map
	vmSeq   atomic.Uint32 // own MACs given so far
	virtMu  sync.Mutex    // held while virt-controller is started again
	// nodeBlocksLeft are the blocks of a deleted node still there when its
	// Node was made again, by node.
	nodeBlocksLeft sync.Map
	heldStormDone  atomic.Bool // a claim storm held the controller down (claimStorm)
	// gcLocks keep a GC of (node, network) from running while an ADD of
	// that node and network is in flight: the runtime's list of valid
	// attachments is only complete between its own ADDs.
	gcLocks map[string]*sync.RWMutex
	nextID  int
	idMu    sync.Mutex
	// sticky: which sticky slot presents each MAC, and each MAC's
	// address (stickyops.go).
	sticky stickyState
	// unused are reservations of live pods no live attachment holds, at quiescence.
	unused []string
	// allowed are the claims in an allowed state (I4) at quiescence.
	allowed []string
}

func newRunner(c *cluster, v *violations) *runner {
	r := &runner{c: c, model: newModel(), hist: v.hist, counts: &counters{}, viol: v,
		slots: map[string][]*slot{}, gcLocks: map[string]*sync.RWMutex{}, refused: map[string]string{}}
	r.vms.atts = map[types.UID]map[string]*attachment{}
	r.sticky = stickyState{holder: map[string]*slot{}, last: map[string]*stickyRecord{}}
	for i := range capiSlots {
		r.capi = append(r.capi, &capiSlot{name: fmt.Sprintf("capi-%d", i)})
	}
	for _, pool := range []string{poolPods, poolStatic, poolOdd, poolSmall, poolVMPods, poolSticky} {
		for i := range poolSizes[pool] {
			s := &slot{pool: pool, idx: i, node: c.nodes[i%numNodes], net: slotNetwork(pool, i)}
			switch pool {
			case poolStatic:
				s.static = fmt.Sprintf("10.60.0.%d/24", 240+i)
			case poolSticky:
				s.mac = stickyMAC(i / 2) // slots 2k and 2k+1: adjacent nodes
			}
			r.slots[pool] = append(r.slots[pool], s)
		}
	}
	for i := range poolSizes[poolVM] {
		r.claims = append(r.claims, &claimSlot{idx: i, name: fmt.Sprintf("vm-%d.chaos-vm", i)})
	}
	for _, n := range c.nodes {
		for _, net := range networks {
			r.gcLocks[n.name+"/"+net.name] = &sync.RWMutex{}
		}
		for _, net := range vmNetworks {
			r.gcLocks[n.name+"/"+net.name] = &sync.RWMutex{}
		}
	}
	return r
}

func (r *runner) id() int {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	r.nextID++
	return r.nextID
}

// run executes one step.
func (r *runner) run(ctx context.Context, st step) {
	r.counts.inc("op:" + st.kind.String())
	switch st.kind {
	case opPoolEdit:
		r.editPool(ctx, st)
		return
	case opBadNAD:
		r.badNAD(ctx, st)
		return
	case opNodeDelete:
		r.deleteNode(ctx, st)
		return
	case opClaimStorm:
		r.claimStorm(ctx, st)
		return
	case opCAPIClaim:
		r.capiClaim(ctx, st)
		return
	case opGC:
		r.gc(ctx, st)
		return
	case opClaimStart, opClaimMigrate, opClaimRestart, opClaimDelete, opClaimEdit:
		r.claimOp(ctx, st, r.claims[st.slot])
		return
	case opCheck:
		if st.pool == poolVM {
			r.claimOp(ctx, st, r.claims[st.slot])
			return
		}
	case opStaleDel:
		r.staleDel(ctx, st, r.slots[st.pool][st.slot])
		return
	}
	s := r.slots[st.pool][st.slot]
	s.mu.Lock()
	defer s.mu.Unlock()
	if !r.flushPending(ctx, st.seq, &s.pending) {
		return
	}
	switch st.kind {
	case opAdd:
		if s.cur != nil && r.model.stateOf(s.cur) == attLive {
			r.repeatAdd(ctx, st.seq, s.node, s.net, s.cur, s.static)
			return
		}
		r.newSandbox(ctx, st, s, false)
	case opNewSandbox:
		r.newSandbox(ctx, st, s, st.flag)
	case opDel:
		if s.cur != nil {
			r.del(ctx, st.seq, s.cur, &s.pending)
			s.oldMu.Lock()
			s.old = append(s.old, s.cur) // runtimes repeat DELs: a late one may come
			s.oldMu.Unlock()
			s.cur = nil
		}
	case opCheck:
		if s.cur != nil && r.model.stateOf(s.cur) == attLive {
			r.check(ctx, st.seq, s.node, s.net, s.cur, s.static)
		}
	case opPodDelete:
		r.podDelete(ctx, st, s)
	}
}

// ensurePod creates the slot's pod if it has none.
func (r *runner) ensurePod(ctx context.Context, op int, s *slot) bool {
	if s.pod != nil {
		return true
	}
	if s.mac != "" && !r.sticky.take(s) {
		r.counts.inc("sticky:mac-busy")
		return false
	}
	s.gen++
	elem := map[string]any{"name": s.net.nad, "namespace": namespace, "interface": ifName}
	if s.static != "" {
		elem["ips"] = []string{s.static}
	}
	if s.mac != "" {
		elem["mac"] = s.mac
	}
	pod, err := r.createPod(ctx, op, fmt.Sprintf("%s-%d-g%d", s.pool, s.idx, s.gen), s.node.name, elem)
	if err != nil {
		r.stickyPodGone(s, false)
		return false
	}
	s.pod = pod
	s.oldMu.Lock()
	s.old = nil
	s.oldMu.Unlock()
	return true
}

func (r *runner) newAttachment(pod *corev1.Pod, n *node, net *network) *attachment {
	return &attachment{network: net.name, pool: net.pool, key: net.key, node: n.name, podNS: pod.Namespace, podName: pod.Name, podUID: pod.UID,
		ifName: ifName, containerID: fmt.Sprintf("sb-%s-%d", pod.Name, r.id())}
}

// newSandbox starts a new sandbox of the slot's pod. The runtime tears
// the previous one down first (its DEL), or, when raceDel, that DEL comes
// late and races the new sandbox's ADD: it must not release the address
// the new sandbox takes over.
func (r *runner) newSandbox(ctx context.Context, st step, s *slot, raceDel bool) {
	if !r.ensurePod(ctx, st.seq, s) {
		return
	}
	prev := s.cur
	a := r.newAttachment(s.pod, s.node, s.net)
	a.mac = s.mac
	done := r.model.touch(a.holder())
	defer done()
	if prev != nil {
		s.oldMu.Lock()
		s.old = append(s.old, prev)
		s.oldMu.Unlock()
		if !raceDel && !r.del(ctx, st.seq, prev, &s.pending) {
			return // the runtime retries the teardown before a new sandbox
		}
	}
	s.cur = a
	var (
		wg         sync.WaitGroup
		prevUnpaid []*attachment
	)
	if raceDel && prev != nil {
		// Whether this DEL releases anything depends on the race (the new
		// sandbox may take the reservation over first): I13 does not
		// count it as a release.
		prev.lateDel = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.del(ctx, st.seq, prev, &prevUnpaid)
		}()
	}
	_ = r.add(ctx, st.seq, s.node, s.net, a, s.static, &s.pending)
	wg.Wait()
	s.pending = append(s.pending, prevUnpaid...)
	if r.model.stateOf(a) != attLive {
		s.cur = nil
	}
}

// add sends the ADD of a new attachment; on failure the runtime tears the
// sandbox down with a DEL (kept pending until it succeeds). It returns the
// ADD's error (nil when it succeeded).
func (r *runner) add(ctx context.Context, op int, n *node, net *network, a *attachment, static string, pending *[]*attachment) error {
	lock := r.gcLocks[n.name+"/"+net.name]
	lock.RLock()
	r.model.add(a)
	var (
		want     netip.Addr
		deadline time.Time
		judged   bool
	)
	if isSticky(a) {
		want, deadline, judged = r.stickyExpect(a)
	}
	resp, err := r.cni(ctx, op, n, cniproto.CmdAdd, a, net.netConf(static))
	lock.RUnlock()
	if err == nil {
		ips, perr := parseResult(resp)
		if perr == nil {
			if a.remadeClaim {
				r.claimOfADD(ctx, a, ips)
			}
			r.addSucceeded(a, ips, static)
			if isSticky(a) {
				r.stickyAdded(a, ips, want, deadline, judged)
			}
			return nil
		}
		r.violate("I5", "bad-result", fmt.Sprintf("ADD of %s succeeded with an unreadable result: %v", a.containerID, perr), a.podName)
		err = perr
	}
	r.model.setState(a, attFailed)
	r.del(ctx, op, a, pending)
	return err
}

// claimOfADD finds which claim of a's claim name an ADD got its
// addresses from: the UID its reservations name. A VM's claim that was
// being deleted when the simulated kubelet read it is made again by
// ipkeeper-controller while the agent waits, and the ADD gets that one's.
// A reservation gone or not a claim's leaves the UID read before the ADD.
func (r *runner) claimOfADD(ctx context.Context, a *attachment, ips []netip.Addr) {
	for _, ip := range ips {
		var res ipkv1alpha1.IPReservation
		if err := r.c.cp.Client.Get(ctx, client.ObjectKey{Name: naming.Reservation(a.key, ip)}, &res); err != nil {
			continue
		}
		o := res.Spec.Owner
		if l := res.Spec.LentTo; l != nil && l.Namespace == a.podNS && l.Name == a.claimName && !res.Spec.Released() {
			r.counts.inc("vm-add-got-lent-address")
			r.model.lentFrom(a, o.UID, o.Name, l.UID)
			return
		}
		if o.Kind == ipkv1alpha1.OwnerIPAMClaim && o.Namespace == a.podNS && o.Name == a.claimName && !res.Spec.Released() {
			if o.UID != a.claimUID {
				r.counts.inc("vm-claim-made-again-during-add")
				r.model.adoptClaim(a, o.UID)
			}
			return
		}
	}
}

// addSucceeded records a successful ADD and checks I1 (and that a static
// request got its address).
func (r *runner) addSucceeded(a *attachment, ips []netip.Addr, static string) {
	if static != "" {
		r.counts.inc("static-ok")
		if want := netip.MustParsePrefix(static).Addr(); !slices.Contains(ips, want) {
			r.violate("I2", "static-ip-differs", fmt.Sprintf("ADD of %s asked for static IP %s and got %s", a.containerID, want, formatAddrs(ips)), a.podName)
		}
	}
	if a.claimName != "" {
		r.counts.inc("claim-ok")
	}
	r.counts.inc("check:I1")
	clash, macClash, early := r.model.succeeded(a, ips)
	r.checkQuota(a)
	for _, o := range clash {
		keys := []string{a.podName, o.podName, a.containerID, o.containerID}
		for _, ip := range ips {
			keys = append(keys, naming.Reservation(a.key, ip))
		}
		r.violate("I1", "double-allocation", fmt.Sprintf("address in two live attachments: %s and %s", r.model.describe(a), r.model.describe(o)), keys...)
	}
	if a.mac != "" {
		r.counts.inc("check:I11")
		r.countMAC(a, ips)
	}
	for _, o := range macClash {
		r.violate("I11", "mac-held-twice", fmt.Sprintf("MAC %s on two live interfaces of network %s: %s and %s", a.mac, a.network, r.model.describe(a), r.model.describe(o)),
			a.podName, o.podName, a.containerID, o.containerID, a.claimName, o.claimName)
	}
	for _, e := range early {
		r.violate("I1", "reused-in-cooldown", fmt.Sprintf("ADD of %s: %s", r.model.describe(a), e), a.podName, a.containerID)
	}
}

// ownMACPrefix begins the MACs the checker's VMs set themselves; a
// derived MAC never does (package macaddr).
const ownMACPrefix = "02:00:00:"

// countMAC counts where a launcher interface's MAC came from: the
// addresses its ADD got (the webhook, from its claim), the VM's own, or
// neither (a claim made again with other addresses after its launcher
// was admitted, say), which I11 then judges like any other.
func (r *runner) countMAC(a *attachment, ips []netip.Addr) {
	derived, _ := macaddr.For(ips)
	switch {
	case a.mac == derived.String():
		r.counts.inc("mac:of-address")
	case strings.HasPrefix(a.mac, ownMACPrefix):
		r.counts.inc("mac:own")
	default:
		r.counts.inc("mac:other")
	}
}

// repeatAdd sends the ADD of a live attachment again, as a runtime does
// when it retries: the answer must be the same addresses.
func (r *runner) repeatAdd(ctx context.Context, op int, n *node, net *network, a *attachment, static string) {
	done := r.model.touch(a.holder())
	defer done()
	resp, err := r.cni(ctx, op, n, cniproto.CmdAdd, a, net.netConf(static))
	if err != nil {
		return
	}
	ips, err := parseResult(resp)
	if err != nil {
		r.violate("I5", "bad-result", fmt.Sprintf("repeated ADD of %s: %v", a.containerID, err), a.podName)
		return
	}
	if !slices.Equal(ips, a.ips) {
		r.violate("I2", "repeated-add-differs", fmt.Sprintf("repeated ADD of live attachment %s returned %s", r.model.describe(a), formatAddrs(ips)),
			a.podName, a.containerID)
	}
}

// del sends the DEL of attachment a; until it succeeds the attachment
// stays pending (the runtime retries teardown).
func (r *runner) del(ctx context.Context, op int, a *attachment, pending *[]*attachment) bool {
	done := r.model.touch(a.holder())
	defer done()
	r.model.setState(a, attReleasing)
	sent := time.Now()
	if _, err := r.cni(ctx, op, r.node(a.node), cniproto.CmdDel, a, r.netOf(a).netConf("")); err != nil {
		if !slices.Contains(*pending, a) {
			*pending = append(*pending, a)
		}
		if isSticky(a) {
			r.stickyDelFailed(a, sent)
		}
		return false
	}
	r.model.setState(a, attDead)
	*pending = slices.DeleteFunc(*pending, func(p *attachment) bool { return p == a })
	if isSticky(a) {
		r.stickyReleased(a)
	}
	return true
}

// flushPending retries the DELs a slot still owes; false if one fails.
func (r *runner) flushPending(ctx context.Context, op int, pending *[]*attachment) bool {
	for _, a := range slices.Clone(*pending) {
		if !r.del(ctx, op, a, pending) {
			return false
		}
	}
	return true
}

// check sends CHECK for a live attachment. A failure that is not "try
// again later" while nothing else touches the attachment means the agent
// itself finds the attachment's reservation wrong (I2).
func (r *runner) check(ctx context.Context, op int, n *node, net *network, a *attachment, static string) {
	gen, quiet := r.model.holderQuiet(a.holder())
	_, err := r.cni(ctx, op, n, cniproto.CmdCheck, a, net.netConf(static))
	r.counts.inc("check:CHECK")
	code, isCNI := cniCode(err)
	if err == nil || !quiet || !isCNI || code == 11 {
		return // passed, or the attachment changing, the agent down, or "try again later"
	}
	if g, q := r.model.holderQuiet(a.holder()); q && g == gen && r.model.stateOf(a) == attLive {
		r.violate("I2", checkClass(a), fmt.Sprintf("CHECK of live attachment %s failed: %v", r.model.describe(a), err), a.podName, a.containerID)
	}
}

// staleDel sends a late DEL for an earlier sandbox of the slot's pod.
func (r *runner) staleDel(ctx context.Context, st step, s *slot) {
	s.oldMu.Lock()
	if len(s.old) == 0 {
		s.oldMu.Unlock()
		return
	}
	a := s.old[int(st.pick%uint64(len(s.old)))]
	s.oldMu.Unlock()
	_, _ = r.cni(ctx, st.seq, s.node, cniproto.CmdDel, a, s.net.netConf(s.static))
}

// podDelete deletes the slot's pod: after a DEL of its sandbox (flag), or
// with that DEL lost, left to the controller's garbage collector.
func (r *runner) podDelete(ctx context.Context, st step, s *slot) {
	if s.pod == nil {
		return
	}
	var holders []string
	if s.cur != nil {
		holders = append(holders, s.cur.holder())
	}
	done := r.model.touch(holders...)
	defer done()
	delSent := true
	if s.cur != nil {
		if st.flag {
			delSent = r.del(ctx, st.seq, s.cur, &s.pending)
		} else {
			delSent = false
			r.counts.inc("lost-del")
		}
		r.model.setState(s.cur, attReleasing)
	}
	if err := r.deletePod(ctx, st.seq, s.pod); err != nil {
		return
	}
	r.stickyPodGone(s, delSent && len(s.pending) == 0)
	for _, a := range append([]*attachment{s.cur}, s.pending...) {
		if a != nil {
			r.model.setState(a, attDead)
		}
	}
	s.pod, s.cur, s.pending = nil, nil, nil
	s.oldMu.Lock()
	s.old = nil
	s.oldMu.Unlock()
}

// gc sends a CNI GC to one node for one network, listing every sandbox
// the runtime still knows there.
// staleGCListAge is how far a stale list of valid attachments predates its
// GC call: well within the agent's --cni-gc-min-age (1m).
const staleGCListAge = 10 * time.Second

// gcRestartShift selects the bits of step.pick that say whether a GC with
// a stale list comes after an agent restart (a quarter of them).
const gcRestartShift = 24

func (r *runner) gc(ctx context.Context, st step) {
	net := slotNetwork(st.pool, st.slot)
	n := r.c.nodes[st.node]
	lock := r.gcLocks[n.name+"/"+net.name]
	lock.Lock()
	defer lock.Unlock()
	// With the flag, the runtime's list predates the attachments set up in
	// the last staleGCListAge (it built the list, then called GC later; an
	// agent may have restarted in between): the agent must spare them, by
	// the age recorded on their reservations.
	var valid []map[string]string
	var predates int
	r.model.mu.Lock()
	for _, a := range r.model.atts {
		if a.node == n.name && a.network == net.name && a.state != attDead {
			if st.flag && !a.first.IsZero() && time.Since(a.first) < staleGCListAge {
				predates++
				continue
			}
			valid = append(valid, map[string]string{"containerID": a.containerID, "ifname": a.ifName})
		}
	}
	r.model.mu.Unlock()
	conf := map[string]any{}
	for k, v := range net.config {
		conf[k] = v
	}
	conf["cni.dev/valid-attachments"] = valid
	raw := (&network{config: conf}).netConf("")
	gcAtt := &attachment{podNS: "-", podName: "-", containerID: "-", network: net.name, pool: net.pool, key: net.key}
	if st.flag && (st.pick>>gcRestartShift)%4 == 0 {
		// The agent restarts between the runtime's list and its GC call:
		// what the list lacks is spared by the age its reservations
		// record, not by the agent's memory.
		r.counts.inc("gc-after-agent-restart")
		if err := r.c.restartAgent(ctx, n); err != nil {
			r.harnessError(fmt.Errorf("restarting agent %s before a GC: %w", n.name, err))
			return
		}
	}
	seq := r.hist.begin(st.seq, "GC", fmt.Sprintf("%s net=%s valid=%d (list predates %d)", n.name, net.name, len(valid), predates))
	upBefore, epoch := n.state()
	_, err := n.client.Do(ctx, cniproto.Request{Command: cniproto.CmdGC, Config: raw})
	r.hist.end(seq, errString(err))
	r.classify(ctx, cniproto.CmdGC, n, upBefore, epoch, err, gcAtt)
}

// checkClass names the kind of a failed CHECK.
func checkClass(a *attachment) string {
	if a.claimName != "" {
		return "check-failed-claim"
	}
	return "check-failed-pod"
}

// node returns the node named name.
func (r *runner) node(name string) *node {
	for _, n := range r.c.nodes {
		if n.name == name {
			return n
		}
	}
	panic("chaos: unknown node " + name) // attachments are only made for the cluster's nodes
}

// slotNetwork is the network of slot i of a slot pool.
func slotNetwork(pool string, i int) *network {
	switch pool {
	case poolStatic:
		return networks[poolPods]
	case poolVMPods:
		return networks[poolVM]
	case poolSmall:
		if i%2 == 1 {
			return networks["small-b"]
		}
	}
	return networks[pool]
}

// netOf returns the network of an attachment.
func (r *runner) netOf(a *attachment) *network {
	for _, set := range []map[string]*network{networks, vmNetworks} {
		for _, n := range set {
			if n.name == a.network {
				return n
			}
		}
	}
	panic("chaos: unknown network " + a.network) // attachments are only made on the known networks
}
