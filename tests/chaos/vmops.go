// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// VMs with persistent IPs, driven through KubeVirt's real virt-controller
// (framework.KubeVirt simulates the scheduler, the kubelet, Multus and
// virt-handler; the simulated kubelet's CNI requests go to the agents
// like every other pod's, and its record is the harness's model). They
// run in a namespace of their own, with ipkeeper's pod webhook in the
// admission path and the controller making each VM's claims, so the
// faults of the run (controller kills among them) hit the webhook too.
// Each VM, in a loop of its own: start, live migration, NIC hotplug and
// unplug, a live NAD swap to another network whose migration succeeds or
// fails (then the user swaps back), with a hotplug or unplug while the
// swap's migration is pending (blue's swaps go round three NADs, one of
// them from one network to another of the same pool: blueSwaps), stop,
// deletion, a clone, a snapshot
// restored over the VM, a deletion then a restore (vmcopyops.go). Their
// launchers' addresses fall under I1, I2 (a running launcher's address is
// reserved for its claim: releasing a running VM's address is a
// violation), I3, I7, I8 and I10.

const (
	vmNamespace = "chaos-vms"
	numVMs      = 2
	vmTimeout   = 30 * time.Second
	// vmCleanupTimeout bounds the deletion of a VM whose round failed.
	vmCleanupTimeout = 10 * time.Second
	// vmRetryPause paces a VM's rounds after a failure.
	vmRetryPause = time.Second
	// vmRetention is the ipkeeper.io/retain-addresses-for of every other
	// VM (create).
	vmRetention = 10 * time.Minute
	// The logical networks of a VM: blue (swapped between NADs of three
	// networks) and red (hot-plugged and unplugged).
	blue = "blue"
	red  = "red"
)

// vmNetworks are the VMs' NADs, by NAD name.
var vmNetworks = map[string]*network{
	"blue-a": vmNet("blue-a", "chaos-vm-a", "10.64.0.0/26"),
	"blue-b": vmPoolNet("blue-b", "chaos-vm-b", bluePool),
	"blue-c": vmPoolNet("blue-c", "chaos-vm-c", bluePool),
	"red":    vmPoolNet("red", "chaos-vm-red", redPool),
}

// blueSwaps is where a live NAD swap points blue, by the NAD it is on:
// round the three, a VM's first swap (from blueFirstNAD) within one
// pool. blue-b and blue-c are two CNI networks naming one IPPool with a
// reuse cooldown: the swap's new claim must get other addresses of it
// while the source's launcher runs with the old claim's, through a
// pending, a failed and a rolled-back migration (docs/kubevirt.md, Live
// NAD swap), which I1 (the target's ADD against the source's) and I2
// (the source's address reserved for its claim) judge; then to blue-a,
// an inline pool of its own, and back to the shared one.
var blueSwaps = map[string]string{"blue-b": "blue-c", "blue-c": "blue-a", "blue-a": "blue-b"}

// blueFirstNAD is blue's NAD when a VM is made: its first swap, the one
// the short run's first operations try, stays in blue's shared pool.
const blueFirstNAD = "blue-b"

// inSharedPool reports whether a swap of blue from one NAD to another
// stays in one pool (of another network: a swap between NADs of one
// network keeps its claim).
func inSharedPool(from, to string) bool {
	f, t := vmNetworks[from], vmNetworks[to]
	return f != nil && t != nil && f.name != t.name && f.pool == t.pool
}

// The VMs' named pools, each with a reuse cooldown. red's: a VM's red
// claim, released by an unplug and made anew by the next hotplug, gets
// back the address its name held (reservation.KeptFor), which the other
// invariants judge like any claim's writes. blue's, shared by blue-b and
// blue-c: see blueSwaps.
const (
	redPool      = "chaos-vm-red"
	redRange     = "10.64.2.0/26"
	redCooldown  = time.Minute
	bluePool     = "chaos-vm-blue"
	blueRange    = "10.64.1.0/25"
	blueCooldown = time.Minute
)

// vmPools are the VMs' named pools.
var vmPools = []struct {
	name, cidr string
	cooldown   time.Duration
}{{redPool, redRange, redCooldown}, {bluePool, blueRange, blueCooldown}}

// vmPoolNet is a NAD of CNI network name drawing from the named pool.
func vmPoolNet(nad, name, pool string) *network {
	return &network{nad: nad, name: name, pool: pool, key: pool, config: map[string]any{
		"cniVersion": "1.0.0", "name": name, "type": "bridge", "allowPersistentIPs": true,
		"ipam": map[string]any{"type": "ipkeeper", "pool": pool},
	}}
}

func vmNet(nad, name, cidr string) *network {
	return &network{nad: nad, name: name, pool: name, key: name, config: map[string]any{
		"cniVersion": "1.0.0", "name": name, "type": "bridge", "allowPersistentIPs": true,
		"ipam": map[string]any{"type": "ipkeeper", "range": cidr},
	}}
}

// vmActor runs one VM's life cycle.
type vmActor struct {
	r    *runner
	kv   *framework.KubeVirt
	rng  *rand.Rand
	name string
	vm   *kubevirtv1.VirtualMachine
	nad  string // blue's NAD
	red  bool   // red plugged
	// first are the actor's first operations, before random ones.
	first  []string
	gen    int // VMs made so far
	copies int // clones and snapshots made so far (vmcopyops.go)
	// redIPs are the addresses the VM's red claim last recorded.
	redIPs []string
	// ownMACs: the actor's odd VMs set blue's MAC themselves.
	ownMACs bool
	// firstRetries: how often the head of first failed in a row.
	firstRetries int
}

// vmPods is the simulated kubelet's record of the VMs' launcher
// attachments, by pod UID and interface.
type vmPods struct {
	mu      sync.Mutex
	atts    map[types.UID]map[string]*attachment
	pending []*attachment // DELs that failed; retried at quiescence
}

// startVMs creates the VMs' NADs, turns on the KubeVirt feature gates
// ipkeeper and the NAD swap need, and runs one actor per VM until ctx
// ends.
func (r *runner) startVMs(ctx context.Context, seed uint64) (*sync.WaitGroup, error) {
	c := r.c.cp.Client
	for _, ns := range []string{vmNamespace, vmRecvNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	for _, p := range vmPools {
		pool := &ipkv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: p.name}, Spec: ipkv1alpha1.IPPoolSpec{
			Ranges: []ipkv1alpha1.PoolRange{{Range: p.cidr}}, ReuseCooldown: &ipkv1alpha1.Duration{Duration: p.cooldown}}}
		if err := c.Create(ctx, pool); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating IPPool %s: %w", p.name, err)
		}
	}
	for _, n := range vmNetworks {
		raw, err := json.Marshal(n.config)
		if err != nil {
			return nil, err
		}
		// The same NADs where the VMs move to (vmmoveops.go).
		for _, ns := range []string{vmNamespace, vmRecvNamespace} {
			nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.nad},
				Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(raw)}}
			if err := c.Create(ctx, nad); err != nil {
				return nil, fmt.Errorf("creating NAD %s/%s: %w", ns, n.nad, err)
			}
		}
	}
	kv := &framework.KubeVirt{C: c, Timeout: vmTimeout, Kubelet: framework.PodRunner{Run: r.vmRun, Detach: r.vmDetach, Stop: r.vmStop}}
	r.kv = kv
	if err := kv.SetFeatureGate(ctx, true); err != nil {
		return nil, err
	}
	for _, gate := range []string{framework.LiveUpdateNADRefGate, framework.DecentralizedLiveMigrationGate} {
		if err := framework.SetKubeVirtGate(ctx, c, gate, true); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	for i := range numVMs {
		a := &vmActor{r: r, kv: kv, rng: rand.New(rand.NewPCG(seed, uint64(0x7a0+i))), name: fmt.Sprintf("vm-%d", i), first: vmFirstOps[i%len(vmFirstOps)], ownMACs: i == 1}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.run(ctx)
		}()
	}
	return &wg, nil
}

// The VM operations.
var vmOps = []string{"migrate", "swap", "swap-hotplug", "swap-fails", "hotplug", "stop", "delete", "clone", "restore", "delete-restore", "move"}

// vmFirstOps are each actor's first operations: together, every kind;
// each actor's first two are the swaps within blue's shared pool
// (blueFirstNAD) the short run must see, one failed and swapped back,
// one done, so that a fault in the way of one actor's leaves the other's.
var vmFirstOps = [][]string{
	{"swap-fails", "swap-hotplug", "migrate", "move", "swap", "clone"},
	{"swap-fails", "swap", "hotplug", "swap-hotplug", "restore", "delete-restore", "stop", "delete"},
}

func (a *vmActor) run(ctx context.Context) {
	for ctx.Err() == nil {
		if a.vm == nil {
			if err := a.create(ctx); err != nil {
				a.failed(ctx, "create", err)
				continue
			}
		}
		vmi, err := a.running(ctx)
		if err != nil {
			a.failed(ctx, "start", err)
			continue
		}
		a.observeGuest(ctx, vmi)
		op := vmOps[a.rng.IntN(len(vmOps))]
		first := len(a.first) > 0
		if first { // every kind early, so that a short run has each
			op, a.first = a.first[0], a.first[1:]
		}
		tried := op
		if op == "move" && a.r.makerExternal.Load() {
			// ipam-extensions' claims take no part in a handover: a move
			// would judge nothing.
			op = "migrate"
		}
		seq := a.r.hist.begin(0, "VM", a.name+" "+op)
		err = a.do(ctx, op, vmi)
		a.r.hist.end(seq, errString(err))
		if err != nil {
			if first && a.firstRetries < maxFirstRetries {
				// A fault of the run came in the way: that kind comes
				// again next, or a short run may never see it succeed.
				a.first = append([]string{tried}, a.first...)
				a.firstRetries++
			}
			a.failed(ctx, op, err)
			continue
		}
		if first {
			a.firstRetries = 0
		}
		a.r.counts.inc("vm:" + op)
	}
}

// maxFirstRetries bounds how often one of an actor's first operations is
// tried again after a failure.
const maxFirstRetries = 2

// create makes the actor's next VM. Each is named anew (<actor>-g<n>): a
// VM a failed round left behind (its deletion stuck, say, behind a
// migration whose simulated handlers stopped mid-way) keeps its claims
// and addresses, which the invariants go on judging, and does not hold
// the next one up.
func (a *vmActor) create(ctx context.Context) error {
	a.gen++
	name := fmt.Sprintf("%s-g%d", a.name, a.gen)
	a.r.vmNames.Store(name, true)
	blueNet := framework.VMNetwork{Name: blue, NAD: blueFirstNAD}
	if a.ownMACs && a.gen%2 == 1 {
		// Every other VM of this actor sets blue's MAC itself: its
		// launchers must carry that one, never ipkeeper's (I11).
		n := a.r.vmSeq.Add(1)
		blueNet.MAC = fmt.Sprintf("%s00:%02x:%02x", ownMACPrefix, byte(n>>8), byte(n))
		a.r.ownMACs.Store(name, blueNet.MAC)
	}
	vm := framework.NewVM(vmNamespace, name, blueNet)
	if blueNet.MAC != "" {
		// And its pod network's: its guest configuration leaves that one
		// to DHCP (I12).
		vm.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:00:5f" + blueNet.MAC[len(ownMACPrefix)-1:]
	}
	// Every VM asks for its guest network configuration (I12).
	vm.Annotations = map[string]string{guestnet.Annotation: "true"}
	if a.gen%2 == 1 {
		// Every other VM keeps its addresses for a while after their
		// claims are released (vmcopyops.go judges it).
		vm.Annotations[claimstatus.RetentionAnnotation] = vmRetention.String()
	}
	if err := a.kv.C.Create(ctx, vm); err != nil {
		return fmt.Errorf("creating VirtualMachine %s/%s: %w", vmNamespace, name, err)
	}
	a.vm, a.nad, a.red, a.redIPs = vm, blueFirstNAD, false, nil
	return nil
}

// running returns the VM's VMI, starting the VM on a node when it runs
// nowhere.
func (a *vmActor) running(ctx context.Context) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err := a.kv.C.Get(ctx, client.ObjectKeyFromObject(a.vm), vmi)
	if err == nil && vmi.DeletionTimestamp == nil && vmi.Status.Phase == kubevirtv1.Running {
		return vmi, nil
	}
	node := a.r.c.nodes[a.rng.IntN(numNodes)].name
	vmi, _, err = a.kv.Start(ctx, a.vm, node)
	if err == nil {
		a.r.counts.inc("vm:start")
	}
	return vmi, err
}

// do runs one operation on the running VM.
func (a *vmActor) do(ctx context.Context, op string, vmi *kubevirtv1.VirtualMachineInstance) error {
	other := a.otherNode(vmi)
	switch op {
	case "migrate":
		_, _, err := a.kv.Migrate(ctx, vmi, other)
		return err
	case "hotplug":
		return a.plug(ctx)
	case "stop":
		return a.kv.Stop(ctx, a.vm)
	case "delete":
		err := a.kv.DeleteVM(ctx, a.vm, metav1.DeletePropagationForeground)
		a.vm = nil
		return err
	case "clone":
		return a.clone(ctx)
	case "restore":
		return a.restore(ctx, false)
	case "delete-restore":
		return a.restore(ctx, true)
	case "move":
		return a.move(ctx, vmi)
	}
	// A live NAD swap of blue to the next network (blueSwaps):
	// virt-controller marks the VMI MigrationRequired; its migration moves
	// the VM to the new network, or fails (the VM stays on the old one; the
	// user swaps back).
	from, to := a.nad, blueSwaps[a.nad]
	vmi, err := a.kv.SwapNAD(ctx, a.vm, blue, to)
	if err != nil {
		return err
	}
	if op == "swap-hotplug" {
		// Pending swap: a NIC hot-plug or unplug makes virt-controller
		// rewrite the source launcher's networks annotation from the new
		// spec; the source must keep its claim.
		if err := a.plug(ctx); err != nil {
			return err
		}
	}
	stop := a.kv.HandlerDropsMigrationRequired(ctx, vmi)
	defer stop()
	if op == "swap-fails" {
		if _, _, err := a.kv.Migrate(ctx, vmi, other, framework.FailMigration()); err != nil {
			return err
		}
		if _, err := a.kv.SwapNADBack(ctx, a.vm, blue, from); err != nil {
			return err
		}
		a.countSwap(op, from, to)
		return nil
	}
	if _, _, err := a.kv.Migrate(ctx, vmi, other); err != nil {
		return err
	}
	a.nad = to
	a.countSwap(op, from, to)
	return nil
}

// countSwap counts a swap done (its migration succeeded, or failed and
// the user swapped back) within blue's shared pool, by kind
// (vm:<op>-in-shared-pool): the swaps the short run must have seen.
func (a *vmActor) countSwap(op, from, to string) {
	if inSharedPool(from, to) {
		a.r.counts.inc("vm:" + op + "-in-shared-pool")
	}
}

// plug hot-plugs red, or unplugs it.
func (a *vmActor) plug(ctx context.Context) error {
	if a.red {
		if err := a.kv.Unplug(ctx, a.vm, red); err != nil {
			return err
		}
		a.red = false
		return nil
	}
	if _, err := a.kv.Hotplug(ctx, a.vm, framework.VMNetwork{Name: red, NAD: "red"}); err != nil {
		return err
	}
	a.red = true
	a.noteRedAddress(ctx)
	return nil
}

// otherNode is a node the VMI does not run on.
func (a *vmActor) otherNode(vmi *kubevirtv1.VirtualMachineInstance) string {
	for {
		n := a.r.c.nodes[a.rng.IntN(numNodes)].name
		if n != vmi.Status.NodeName {
			return n
		}
	}
}

// failed counts a failed VM operation (a fault of the run, an unfilled
// claim) and starts over with a new VM; the old one is deleted (the
// node's part played) unless that takes longer than vmCleanupTimeout: it
// is then left, keeping its claims, and the invariants go on judging it.
func (a *vmActor) failed(ctx context.Context, op string, err error) {
	if ctx.Err() != nil {
		return // the run is over
	}
	a.r.counts.inc("vm-failed:" + op)
	a.r.vmErrs.Store(op, err.Error())
	if a.r.longVMs {
		a.r.virtControllerUp(ctx)
	}
	// What failed was most likely a fault of the run: give it a moment
	// before the next round (a pace, not a wait for anything).
	select {
	case <-ctx.Done():
		return
	case <-time.After(vmRetryPause):
	}
	if a.vm == nil {
		return
	}
	// Delete it, playing the node's part, for a while; past that it is
	// left as it is and the next round makes another VM.
	dctx, cancel := context.WithTimeout(ctx, vmCleanupTimeout)
	defer cancel()
	if err := a.kv.DeleteVM(dctx, a.vm, metav1.DeletePropagationForeground); err != nil && !apierrors.IsNotFound(err) {
		a.r.counts.inc("vm-failed:cleanup")
	}
	a.vm = nil
}

// virtControllerUp starts KubeVirt's virt-controller again if it exited
// (it does when it loses its lease while the API server restarts), as
// the kubelet would restart its pod.
func (r *runner) virtControllerUp(ctx context.Context) {
	r.virtMu.Lock()
	defer r.virtMu.Unlock()
	restarted, err := r.c.cp.RestartVirtControllerIfExited(ctx)
	if restarted {
		r.counts.inc("virt-controller-restarts")
	}
	if err != nil {
		r.vmErrs.Store("virt-controller restart", err.Error())
	}
}

// vmRun is the simulated kubelet's sandbox start (or a hotplug's attach):
// a CNI ADD of each given interface through the node's agent, recorded
// in the model under the claim the launcher references (or, if ipkeeper's
// webhook was down when it was created, the claim its VM's network
// implies: the agent finds that one).
func (r *runner) vmRun(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error) {
	elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
	if err != nil {
		return nil, err
	}
	n := r.node(pod.Spec.NodeName)
	var vmName string // the VMI's, which is its VM's
	if owner := metav1.GetControllerOf(pod); owner != nil {
		vmName = owner.Name
	}
	out := map[string][]string{}
	for _, el := range elems {
		if !slices.Contains(ifaces, el.Interface) {
			continue
		}
		net := vmNetworks[el.Name]
		if net == nil {
			return nil, fmt.Errorf("pod %s/%s attaches unknown NAD %s", pod.Namespace, pod.Name, el.Name)
		}
		a := r.newAttachment(pod, n, net)
		a.ifName, a.mac = el.Interface, el.MAC
		if own, ok := r.ownMACs.Load(vmName); ok && el.Interface == kubevirt.PodInterfaceName(blue) && el.MAC != own {
			r.violate("I11", "own-mac-replaced", fmt.Sprintf("launcher %s/%s of VM %s, which sets MAC %s on %s, carries mac %q", pod.Namespace, pod.Name, vmName, own, blue, el.MAC),
				pod.Name, vmName)
		}
		if a.claimName = el.ClaimRef; a.claimName == "" {
			r.counts.inc("vm-launcher-without-claim-reference")
			derives, err := r.agentsDerive(ctx)
			if err != nil {
				return nil, err
			}
			if derives {
				if a.claimName, err = r.impliedClaim(ctx, pod.Namespace, vmName, el.Interface, net.name); err != nil {
					return nil, err
				}
			}
		}
		if a.claimName != "" {
			var claim ipamclaimsv1alpha1.IPAMClaim
			if err := r.c.cp.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: a.claimName}, &claim); err != nil {
				return nil, fmt.Errorf("reading IPAMClaim %s of pod %s: %w", a.claimName, pod.Name, err)
			}
			a.claimUID, a.remadeClaim = claim.UID, true
		}
		done := r.model.touch(a.holder())
		var pending []*attachment
		err := r.add(ctx, 0, n, net, a, "", &pending)
		done()
		r.vms.mu.Lock()
		r.vms.pending = append(r.vms.pending, pending...)
		if err == nil {
			if r.vms.atts[pod.UID] == nil {
				r.vms.atts[pod.UID] = map[string]*attachment{}
			}
			r.vms.atts[pod.UID][el.Interface] = a
		}
		r.vms.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("ADD of pod %s interface %s: %w", pod.Name, el.Interface, err)
		}
		r.counts.inc("vm-launcher-adds")
		for _, ip := range r.model.ipsOf(a) {
			out[el.Interface] = append(out[el.Interface], ip.String())
		}
	}
	return out, nil
}

// agentsDerive tells whether the agents derive the claim of a launcher
// interface that references none: only while the webhook configuration
// says it makes every reference (webhook.ReferencesAll); otherwise the
// interface gets an ordinary address. The agents cache that for up to
// 10 s and the controller changes it within a second of a claims maker
// change (makerops.go), so the answer is read once it is settled: the
// simulated kubelet waits until then.
func (r *runner) agentsDerive(ctx context.Context) (bool, error) {
	for {
		changed := time.Unix(0, r.makerChangedAt.Load())
		wait := time.Until(changed.Add(makerSettle))
		if wait <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
	}
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	if err := r.c.cp.Client.Get(ctx, client.ObjectKey{Name: webhookConfig}, &whc); err != nil {
		return false, fmt.Errorf("reading webhook configuration %s: %w", webhookConfig, err)
	}
	return whc.Annotations[webhook.ReferencesAnnotation] == webhook.ReferencesAll, nil
}

// impliedClaim is the claim of a launcher interface that references none
// (its pod was admitted while the webhook was down): the one the agent
// derives from the VM's logical network by the webhook's rule.
func (r *runner) impliedClaim(ctx context.Context, namespace, vm, iface, network string) (string, error) {
	for _, logical := range []string{blue, red} {
		if kubevirt.PodInterfaceName(logical) != iface {
			continue
		}
		return naming.ClaimFor(vm, logical, network, func(name string) (string, bool, error) {
			var c ipamclaimsv1alpha1.IPAMClaim
			err := r.c.cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &c)
			if apierrors.IsNotFound(err) {
				return "", false, nil
			}
			return c.Spec.Network, err == nil, err
		}, nil)
	}
	return "", fmt.Errorf("interface %s is of no logical network of the VM", iface)
}

// vmDetach is a hot-unplug's detach: a CNI DEL of each interface.
func (r *runner) vmDetach(ctx context.Context, pod *corev1.Pod, ifaces []string) error {
	r.vms.mu.Lock()
	var atts []*attachment
	for _, i := range ifaces {
		if a := r.vms.atts[pod.UID][i]; a != nil {
			atts = append(atts, a)
			delete(r.vms.atts[pod.UID], i)
		}
	}
	r.vms.mu.Unlock()
	r.vmDel(ctx, atts)
	return nil
}

// vmStop tears a launcher's sandbox down: a CNI DEL of every interface.
// A DEL that fails is retried at quiescence; the pod's deletion goes on,
// as a kubelet's does, and the garbage collector releases what a gone
// pod held.
func (r *runner) vmStop(ctx context.Context, pod *corev1.Pod) error {
	r.vms.mu.Lock()
	var atts []*attachment
	for _, a := range r.vms.atts[pod.UID] {
		atts = append(atts, a)
	}
	delete(r.vms.atts, pod.UID)
	r.vms.mu.Unlock()
	r.vmDel(ctx, atts)
	return nil
}

func (r *runner) vmDel(ctx context.Context, atts []*attachment) {
	for _, a := range atts {
		var pending []*attachment
		if !r.del(ctx, 0, a, &pending) {
			r.vms.mu.Lock()
			r.vms.pending = append(r.vms.pending, pending...)
			r.vms.mu.Unlock()
		}
	}
}
