// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Figure 7's scale. IPKEEPER_BENCH_BOOTSTORM_SCALE (a factor in (0, 1])
// or -short (0.1) shrinks every count but the number of agents.
const (
	bootAgents    = 16    // ipkeeper-agent processes, one per simulated node
	bootVMs       = 1000  // VMs of the storm; the two plain pod waves have as many pods
	bootDualVMs   = 200   // VMs of the dual-stack storm
	bootHeld      = 20000 // reservations in the storm's pool before it
	bootHeldNodes = 200   // nodes (without agents) whose pods hold them
	bootMemClaims = 50000 // claims in the cluster for the agents' memory
	// bootCreateInFlight is how many creates setup keeps in flight.
	bootCreateInFlight = 64
)

type bootScale struct {
	factor                                        float64
	vms, dualVMs, held, heldNodes, memClaims, raw int
}

func bootStormScale(b *testing.B) bootScale {
	b.Helper()
	f := 1.0
	if testing.Short() {
		f = 0.1
	}
	if v := os.Getenv("IPKEEPER_BENCH_BOOTSTORM_SCALE"); v != "" {
		var err error
		if f, err = strconv.ParseFloat(v, 64); err != nil || f <= 0 || f > 1 {
			b.Fatalf("IPKEEPER_BENCH_BOOTSTORM_SCALE=%q: want a factor in (0, 1]", v)
		}
	}
	n := func(x int) int { return max(bootAgents, int(float64(x)*f)) }
	return bootScale{factor: f, vms: n(bootVMs), dualVMs: n(bootDualVMs), held: n(bootHeld),
		heldNodes: max(1, int(bootHeldNodes*f)), memClaims: n(bootMemClaims), raw: n(bootVMs)}
}

// Namespaces of figure 7's control plane.
const (
	bootVMNS   = "bs-vms"      // VMs' claims and launchers, plain pods, the NADs
	bootHeldNS = "bs-held"     // the pods holding the pool's addresses before the storm
	bootMemNS  = "bs-mem"      // the claims of the memory figure
	bootCtrlNS = "bs-ipkeeper" // ipkeeper-controller's lease
	// bootLogical is the VMs' KubeVirt network name, bootIf its pod
	// interface (KubeVirt's hashed name), which the claims record.
	bootLogical = "blue"
)

var bootIf = kubevirt.PodInterfaceName(bootLogical)

// bootNet is a network of figure 7: a NAD naming an IPPool.
type bootNet struct {
	nad, network, pool string
	ranges             []string
}

var (
	bootSingle = bootNet{nad: "vm-net", network: "bs-vm", pool: "bs-pool", ranges: []string{"10.160.0.0/16"}}
	bootDual   = bootNet{nad: "vm-dual", network: "bs-dual", pool: "bs-dual", ranges: []string{"10.161.0.0/16", "fd00:a1::/64"}}
	bootMem    = bootNet{nad: "vm-mem", network: "bs-mem", pool: "bs-mem", ranges: []string{"10.162.0.0/16"}}
)

// conf is the NAD's config, which Multus hands the IPAM plugin.
func (n bootNet) conf() json.RawMessage {
	raw, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": n.network, "type": "bridge", "allowPersistentIPs": true,
		"ipam": map[string]any{"type": "ipkeeper", "pool": n.pool}})
	if err != nil {
		panic(err) // plain values always marshal
	}
	return raw
}

// bootCluster is figure 7's cluster: a control plane of its own (figure 5
// leaves 100,000 reservations of pods that never existed: every agent
// would cache 50,000 of them, and the controller's garbage collector would
// work through them all), ipkeeper-controller as a process, and 16 agent
// processes.
type bootCluster struct {
	cp   *framework.ControlPlane
	dir  string
	ctrl *framework.ControllerProcess
	// ctrlPprof is the controller's /debug/pprof/ URL when profiled
	// (IPKEEPER_BENCH_PROFILE_DIR), else empty.
	ctrlPprof string
	nodes     []*node
	// rawOwner owns the raw baseline's reservations; markerPod owns the
	// markers the memory figure syncs agents with.
	rawOwner  *ipamclaimsv1alpha1.IPAMClaim
	markerPod *corev1.Pod
	markers   int
}

func startBootCluster(b *testing.B) *bootCluster {
	b.Helper()
	ctx := context.Background()
	// envtest logs through controller-runtime's logger, which this
	// process never sets otherwise: without one, controller-runtime
	// prints a warning with a stack trace.
	ctrllog.SetLogger(logr.Discard())
	own, err := framework.Start(ctx, framework.Options{WithoutControllerManager: true})
	if err != nil {
		b.Fatalf("starting figure 7's control plane: %v", err)
	}
	b.Cleanup(func() { _ = own.Stop() })
	c := &bootCluster{cp: own, dir: filepath.Join(workDir, "bootstorm")}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{bootVMNS, bootHeldNS, bootMemNS, bootCtrlNS} {
		c.create(b, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	for _, n := range []bootNet{bootSingle, bootDual, bootMem} {
		pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: n.pool}}
		for _, r := range n.ranges {
			pool.Spec.Ranges = append(pool.Spec.Ranges, ipkeeperv1alpha1.PoolRange{Range: r})
		}
		c.create(b, pool)
		ns := bootVMNS
		if n.network == bootMem.network {
			ns = bootMemNS
		}
		c.create(b, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n.nad},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(n.conf())}})
	}
	// The raw baseline's reservations belong to a claim of a network no
	// NAD serves (the controller leaves it alone); the memory figure's
	// markers to a pod. Both exist, so the garbage collector keeps them.
	c.rawOwner = &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: bootVMNS, Name: "raw-owner"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "bs-raw", Interface: bootIf}}
	c.create(b, c.rawOwner)
	c.markerPod = plainPod(bootVMNS, "marker-owner", "bs-nowhere")
	c.create(b, c.markerPod)
	return c
}

// create creates obj or ends the benchmark.
func (c *bootCluster) create(b *testing.B, obj client.Object) {
	b.Helper()
	if err := c.cp.Client.Create(context.Background(), obj); err != nil {
		b.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// createAll runs create(k) for k < n, inFlight at a time, and ends the
// benchmark if any failed.
func createAll(b *testing.B, what string, n, inFlight int, create func(k int) error) {
	b.Helper()
	var failed atomic.Int64
	var first atomic.Value
	runConcurrently(n, inFlight, func(k int) {
		if err := create(k); err != nil {
			if failed.Add(1) == 1 {
				first.Store(err)
			}
		}
	})
	if f := failed.Load(); f > 0 {
		b.Fatalf("creating %s: %d of %d failed, first: %v", what, f, n, first.Load())
	}
}

// poolRange is the first range of pool, parsed.
func (c *bootCluster) poolRange(b *testing.B, name string) (*ipkeeperv1alpha1.IPPool, iprange.Range) {
	b.Helper()
	var pool ipkeeperv1alpha1.IPPool
	if err := c.cp.Client.Get(context.Background(), client.ObjectKey{Name: name}, &pool); err != nil {
		b.Fatal(err)
	}
	ranges, err := ipamconfig.PoolRanges(&pool.Spec)
	if err != nil {
		b.Fatal(err)
	}
	return &pool, ranges[0]
}

// addrs returns the first n addresses of r and the blocks they fill, in order.
func addrs(b *testing.B, r iprange.Range, n int) (ips []netip.Addr, blks []netip.Prefix) {
	b.Helper()
	for ip := range r.Walk(r.Start()) {
		if len(ips) == n {
			break
		}
		if r.Usable(ip) != nil {
			continue
		}
		ips = append(ips, ip)
		if blk := r.BlockOf(ip); len(blks) == 0 || blks[len(blks)-1] != blk {
			blks = append(blks, blk)
		}
	}
	if len(ips) < n {
		b.Fatalf("range %s has fewer than %d addresses", r, n)
	}
	return ips, blks
}

// holdPool fills the storm's pool with n reservations before the storm, as
// agents leave them: pod reservations in the address blocks of nodes that
// run no agent here (heldNodes of them), labelled with their node, so
// only the controller caches them. Their pods exist, so the garbage
// collector keeps them. Pods, blocks and reservations are raw creates.
func (c *bootCluster) holdPool(b *testing.B, n, heldNodes int) {
	b.Helper()
	ctx := context.Background()
	_, r := c.poolRange(b, bootSingle.pool)
	ips, blks := addrs(b, r, n)
	// Block k is node k%heldNodes's.
	blockNode := make(map[netip.Prefix]string, len(blks))
	for k, blk := range blks {
		blockNode[blk] = fmt.Sprintf("bs-held-%d", k%heldNodes)
	}
	createAll(b, "the held addresses' blocks", len(blks), bootCreateInFlight, func(k int) error {
		node := blockNode[blks[k]]
		return c.cp.Client.Create(ctx, &ipkeeperv1alpha1.IPBlock{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Block(bootSingle.pool, blks[k]), Labels: map[string]string{
				naming.PoolLabel: naming.PoolLabelValue(bootSingle.pool), naming.NodeLabel: naming.NodeLabelValue(node)}},
			Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: bootSingle.pool, CIDR: blks[k].String(), Holder: ipkeeperv1alpha1.HolderNode, Node: node},
		})
	})
	createAll(b, "the held addresses' pods and reservations", n, bootCreateInFlight, func(k int) error {
		node := blockNode[r.BlockOf(ips[k])]
		p := plainPod(bootHeldNS, fmt.Sprintf("held-%d", k), node)
		if err := c.cp.Client.Create(ctx, p); err != nil {
			return err
		}
		res := podReservation(bootSingle, ips[k], p, "net1", node)
		res.Labels[naming.NodeLabel] = naming.NodeLabelValue(node)
		return c.cp.Client.Create(ctx, res)
	})
}

// podReservation is the reservation an agent makes for pod's ifName on
// node, outside any block (shared).
func podReservation(n bootNet, ip netip.Addr, p *corev1.Pod, ifName, node string) *ipkeeperv1alpha1.IPReservation {
	return reservation.New(reservation.Params{Pool: n.pool, Key: n.pool, Network: n.network, IP: ip, Interface: ifName,
		ContainerID: framework.SandboxID(p), Node: node,
		Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: p.UID}})
}

// claimReservation is the reservation ipkeeper-controller makes for a
// claim in one of its blocks of IPAMClaims (labelled so no agent is sent
// it), in pool, whose reservations are named from pool.
func claimReservation(pool, network string, ip netip.Addr, claim *ipamclaimsv1alpha1.IPAMClaim) *ipkeeperv1alpha1.IPReservation {
	return reservation.New(reservation.Params{Pool: pool, Key: pool, Network: network, IP: ip, Interface: claim.Spec.Interface,
		Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		Block: reservation.ClaimsBlock})
}

// plainPod is a pod bound to node, as the scheduler leaves it (no kubelet runs).
func plainPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}},
	}
}

// vmClaim is a VM's IPAMClaim as KubeVirt's ipam-extensions makes one:
// spec.network and spec.interface, a controller reference to the VM. It
// carries none of ipkeeper's labels and no finalizer, so ipkeeper's claim
// release controller leaves it alone while no VirtualMachine exists.
func vmClaim(ns, vm string, vmUID types.UID, network string) *ipamclaimsv1alpha1.IPAMClaim {
	return &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm + "." + bootLogical, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: vm, UID: vmUID, Controller: ptr.To(true)}}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: bootIf},
	}
}

// namingNAD records on claim the NAD it is for, in its namespace, as
// ipkeeper-controller's claims maker does. A claim of a VM with no
// launcher yet (the claims-only and backlog waves) is served only when it
// names its NAD or its owner exists (claimaddrs' networkOf), and no
// VirtualMachine exists here.
func namingNAD(claim *ipamclaimsv1alpha1.IPAMClaim, nad string) *ipamclaimsv1alpha1.IPAMClaim {
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[claimstatus.NADAnnotation] = claim.Namespace + "/" + nad
	return claim
}

// launcherPod is a virt-launcher pod of the VM's VMI (named as the VM) as
// virt-controller makes it and ipkeeper's pod webhook leaves it: KubeVirt's
// labels and domain annotation, a controller reference to the VMI, bound
// to node, and a networks annotation whose element references the claim.
func launcherPod(ns, vm, name, node string, n bootNet) *corev1.Pod {
	vmiUID := uuid.NewUUID()
	annot, err := json.Marshal([]map[string]any{{"name": n.nad, "namespace": ns, "interface": bootIf, multus.ClaimRefKey: vm + "." + bootLogical}})
	if err != nil {
		panic(err)
	}
	p := plainPod(ns, name, node)
	p.Labels = map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirtv1.CreatedByLabel: string(vmiUID), kubevirt.VMINameLabel: vm}
	p.Annotations = map[string]string{kubevirtv1.DomainAnnotation: vm, multus.Annotation: string(annot)}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance",
		Name: vm, UID: vmiUID, Controller: ptr.To(true)}}
	p.Spec.Containers[0].Name = "compute"
	return p
}

// startController runs ipkeeper-controller as a process, as deployed but
// for its API client limits, set far above what this API server can
// serve so they are not what limits it, and no pod webhook (the launcher
// pods carry the claim references it would add).
func (c *bootCluster) startController(b *testing.B) {
	b.Helper()
	bin := binaries(b)
	args := []string{"--enable-webhook=false", "--log-level=info",
		"--kube-api-qps=" + strconv.Itoa(bootControllerQPS), "--kube-api-burst=" + strconv.Itoa(2*bootControllerQPS)}
	c.ctrlPprof = ""
	if os.Getenv("IPKEEPER_BENCH_PROFILE_DIR") != "" {
		pp := loopbackAddr(b)
		args, c.ctrlPprof = append(args, "--profiling-bind-address="+pp), "http://"+pp+"/debug/pprof/"
	}
	proc, err := framework.StartControllerProcess(framework.ControllerProcessOptions{
		Binary: bin.Controller, Kubeconfig: c.cp.KubeconfigPath, Dir: c.dir, Namespace: bootCtrlNS,
		WebhookConfigName: "ipkeeper-bootstorm", GCGracePeriod: 2 * time.Minute,
		ExtraArgs: append(args, strings.Fields(os.Getenv("IPKEEPER_BENCH_BOOTSTORM_CONTROLLER_ARGS"))...),
	})
	if err != nil {
		b.Fatal(err)
	}
	c.ctrl = proc
	b.Cleanup(c.stopController)
	if err := proc.WaitReady(context.Background(), 2*time.Minute); err != nil {
		b.Fatal(err)
	}
}

// profileController profiles the controller process over a phase of the
// figure when IPKEEPER_BENCH_PROFILE_DIR is set: controller-bootstorm-<phase>.pprof.
func (c *bootCluster) profileController(b *testing.B, phase string) (done func()) {
	return profileProcess(b, "ipkeeper-controller", c.ctrlPprof, "controller-bootstorm-"+phase+".pprof", phase)
}

// bootControllerQPS is the controller's --kube-api-qps (its burst twice
// that): 50 times its default, more than two cores serve.
// IPKEEPER_BENCH_BOOTSTORM_CONTROLLER_ARGS adds flags (a later flag wins),
// to see what a setting changes (--claim-workers=64); a run with it is not
// one for the table.
const bootControllerQPS = 10000

// cpu returns the CPU time so far of this control plane's kube-apiserver
// (its --cert-dir is in the control plane's Dir) and etcd (its
// --listen-client-urls is EtcdURL): the run's first control plane is
// running too, idle.
func (c *bootCluster) cpu(b *testing.B) time.Duration {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		// Arguments end with a NUL: a port that only starts with ours is another's.
		args := string(cmdline)
		if !strings.Contains(args, "--cert-dir="+filepath.Join(c.cp.Dir, "kube-apiserver")+"\x00") &&
			!strings.Contains(args, "--listen-client-urls="+c.cp.EtcdURL()+"\x00") {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			total += st.cpu
		}
	}
	if total == 0 {
		b.Fatal("found neither the kube-apiserver nor the etcd of figure 7's control plane in /proc")
	}
	return total
}

func (c *bootCluster) stopController() {
	if c.ctrl != nil {
		c.ctrl.Stop()
		c.ctrl = nil
	}
}

func (c *bootCluster) ctrlMetrics(b *testing.B) map[string]*dto.MetricFamily {
	b.Helper()
	return scrapeURL(b, "ipkeeper-controller", "http://"+c.ctrl.MetricsAddr+"/metrics")
}

// waitControllerIdle waits until the controller leads and every work
// queue of it is empty with nothing in progress.
func (c *bootCluster) waitControllerIdle(b *testing.B) {
	b.Helper()
	var depth, busy, leader float64
	err := framework.Eventually(context.Background(), 10*time.Minute, 100*time.Millisecond, func(context.Context) (bool, error) {
		m := c.ctrlMetrics(b)
		depth, busy, leader = sum(m, "workqueue_depth"), sum(m, "workqueue_unfinished_work_seconds"), sum(m, "leader_election_master_status")
		return leader >= 1 && depth == 0 && busy == 0, nil
	})
	if err != nil {
		b.Fatalf("ipkeeper-controller never went idle (leader %v, queued %v, in progress %vs): %v; log:\n%s", leader, depth, busy, err, c.ctrl.Tail(40))
	}
}

// fillWatch records when each claim of a namespace is first seen with
// addresses (status.ips), from a watch of the test's own.
type fillWatch struct {
	mu     sync.Mutex
	at     map[string]time.Time
	ips    map[string][]string
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *bootCluster) watchFills(b *testing.B, ns string) *fillWatch {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ri := c.cp.Dynamic.Resource(ipamclaimsv1alpha1.SchemeGroupVersion.WithResource("ipamclaims")).Namespace(ns)
	list, err := ri.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &toolscache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return ri.Watch(ctx, o) },
	})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	w := &fillWatch{at: map[string]time.Time{}, ips: map[string][]string{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					return
				}
				u, isObj := ev.Object.(*unstructured.Unstructured)
				if !isObj || ev.Type == watch.Deleted {
					continue
				}
				ips, _, _ := unstructured.NestedStringSlice(u.Object, "status", "ips")
				if len(ips) == 0 {
					continue
				}
				now := time.Now()
				w.mu.Lock()
				if _, seen := w.at[u.GetName()]; !seen {
					w.at[u.GetName()], w.ips[u.GetName()] = now, ips
				}
				w.mu.Unlock()
			}
		}
	}()
	b.Cleanup(w.stop)
	return w
}

func (w *fillWatch) stop() {
	w.cancel()
	<-w.done
}

// filled returns when claim was first seen filled, and its addresses.
func (w *fillWatch) filled(claim string) (time.Time, []string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.at[claim]
	return at, w.ips[claim], ok
}

// waitFilled waits until every claim of names was seen filled.
func (w *fillWatch) waitFilled(b *testing.B, names []string) {
	b.Helper()
	missing := 0
	err := framework.Eventually(context.Background(), 5*time.Minute, 50*time.Millisecond, func(context.Context) (bool, error) {
		missing = 0
		for _, n := range names {
			if _, _, ok := w.filled(n); !ok {
				missing++
			}
		}
		return missing == 0, nil
	})
	if err != nil {
		b.Fatalf("%d of %d claims never got addresses: %v", missing, len(names), err)
	}
}

// createMarker creates a reservation every agent caches (shared) and
// waits until every agent of nodes has it: each has then handled every
// watch event the API server sent it before (a watch's events come in order).
func (c *bootCluster) createMarker(b *testing.B, nodes []*node) {
	b.Helper()
	before := make([]float64, len(nodes))
	for i, nd := range nodes {
		before[i] = sum(nd.scrape(b), "ipkeeper_agent_reservations")
	}
	c.markers++
	ip := netip.AddrFrom4([4]byte{10, 172, byte(c.markers >> 8), byte(c.markers)})
	marker := podReservation(bootNet{network: "bs-marker", pool: "bs-marker"}, ip, c.markerPod, "net1", c.markerPod.Spec.NodeName)
	c.create(b, marker)
	err := framework.Eventually(context.Background(), 2*time.Minute, 100*time.Millisecond, func(context.Context) (bool, error) {
		for i, nd := range nodes {
			if sum(nd.scrape(b), "ipkeeper_agent_reservations") < before[i]+1 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatalf("not every agent cached marker reservation %s: %v", marker.Name, err)
	}
}
