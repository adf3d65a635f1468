// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The whole system as a cluster runs it (see Cluster): real control plane,
// ipkeeper-controller and three ipkeeper-agent processes, the real Multus ->
// bridge -> ipkeeper chain in network namespaces, and KubeVirt's real
// virt-controller. Simulated (and named in each test's output): the
// kubelet (Cluster's sandbox loop), the scheduler's binding, Multus'
// dynamic networks controller and virt-handler (framework.KubeVirt).

// Scenarios 1-3: a VM gets an address on a persistent-IP network and a
// plain pod a different one; the VM keeps its address and its MAC across
// stop/start on another node and across a live migration; a second VM
// gets another MAC, and a VM with its own MAC keeps that one.
func TestSystemVMKeepsAddressAcrossRestartAndMigration(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "sys-vm")
	c.DumpOnFailure(t, ns)
	const network = "sys-blue"
	c.BridgeNAD(t, ns, "blue", network, true, map[string]any{"range": "10.81.0.0/24"})
	iface := kubevirt.PodInterfaceName("blue")

	t.Log(c.KV.Simulated())
	vm := c.CreateVM(t, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	// It asks for its guest network configuration, which must say the
	// claim's address and MAC before the first start and after each move
	// (netplan's own generator reads it).
	askGuestConfig, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{guestnet.Annotation: "true"}}})
	if err := c.CP.Client.Patch(ctx, vm, client.RawPatch(types.MergePatchType, askGuestConfig)); err != nil {
		t.Fatal(err)
	}
	guestConfigSays := func(when string, addr netip.Prefix, mac string) {
		t.Helper()
		var last string
		if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			var s corev1.Secret
			if err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: guestnet.SecretName(vm.Name)}, &s); err != nil {
				last = err.Error()
				return false, client.IgnoreNotFound(err)
			}
			files, err := framework.Netplan(ctx, s.Data[guestnet.DataKey])
			if err != nil {
				return false, err
			}
			last = files["10-netplan-blue.network"]
			return strings.Contains(last, "PermanentMACAddress="+mac) && strings.Contains(last, "Address="+addr.String()), nil
		}); err != nil {
			t.Fatalf("%s: the guest network configuration does not say %s with MAC %s: %v\n%s", when, addr, mac, err, last)
		}
	}
	c.WaitClaim(t, ns, "vm1.blue")
	_, launcher := c.StartVM(t, vm, "node-a")
	vmAddr := launcher.MustAddr(t, iface)
	claim := c.WaitClaimIPs(t, ns, "vm1.blue")
	if !slices.Equal(claim.Status.IPs, []string{vmAddr.String()}) {
		t.Fatalf("claim status.ips = %v, the launcher's %s has %s", claim.Status.IPs, iface, vmAddr)
	}
	// The MAC: Multus passes the element's mac (the webhook's, from the
	// claim) to bridge as CNI_ARGS MAC; the NAD needs nothing for it.
	// KubeVirt's bridge binding gives the guest the pod interface's MAC
	// (virt-launcher is simulated: the pod interface keeps it here).
	vmMAC := launcher.MustMAC(t, iface)
	if want, _, _ := macaddr.OfClaim(claim); vmMAC != want.String() {
		t.Fatalf("the launcher's %s has MAC %s, want the claim's %s", iface, vmMAC, want)
	}
	c.WaitClaimMAC(t, ns, "vm1.blue", vmMAC)
	guestConfigSays("first start", vmAddr, vmMAC)
	// A second VM never gets the same MAC; a VM with its own MAC keeps it.
	vm2 := c.CreateVM(t, ns, "vm2", framework.VMNetwork{Name: "blue", NAD: "blue"})
	_, launcher2 := c.StartVM(t, vm2, "node-a")
	if mac2 := launcher2.MustMAC(t, iface); mac2 == vmMAC {
		t.Fatalf("vm2 got vm1's MAC %s", vmMAC)
	} else if want, _, _ := macaddr.OfClaim(c.WaitClaimIPs(t, ns, "vm2.blue")); mac2 != want.String() {
		t.Fatalf("vm2's %s has MAC %s, want its claim's %s", iface, mac2, want)
	}
	const ownMAC = "02:00:00:00:aa:01"
	vm3 := c.CreateVM(t, ns, "vm3", framework.VMNetwork{Name: "blue", NAD: "blue", MAC: ownMAC})
	if _, launcher3 := c.StartVM(t, vm3, "node-c"); launcher3.MustMAC(t, iface) != ownMAC {
		t.Fatalf("vm3's %s has MAC %s, want its own %s", iface, launcher3.MustMAC(t, iface), ownMAC)
	}
	if got, _, _ := macaddr.OfClaim(c.WaitClaimIPs(t, ns, "vm3.blue")); got.String() != ownMAC {
		t.Fatalf("claim vm3.blue says its MAC is %s, want the VM's own %s", got, ownMAC)
	}
	plain := c.MustRun(t, c.PlainPod(t, ns, "plain", "node-b", "blue"))
	plainAddr := plain.MustAddr(t, "net1")
	if plainAddr.Addr() == vmAddr.Addr() {
		t.Fatalf("the plain pod got the VM's address %s", vmAddr)
	}
	mustPing(t, plain, vmAddr.Addr())
	mustPing(t, launcher, plainAddr.Addr())

	// 2. Stop (virt-controller deletes the launcher, the kubelet runs DEL)
	// and start on another node: same address.
	if err := c.KV.Stop(ctx, vm); err != nil {
		t.Fatal(err)
	}
	c.WaitGone(t, launcher.Pod)
	if res := c.Reservations(t, network); len(res) != 4 {
		t.Fatalf("after stop: %d reservations, want 4 (the three claims' and the plain pod's)", len(res))
	}
	vmi, launcher := c.StartVM(t, vm, "node-b")
	if got := launcher.MustAddr(t, iface); got != vmAddr {
		t.Fatalf("after stop/start on node-b the VM has %s, want %s", got, vmAddr)
	}
	if got := launcher.MustMAC(t, iface); got != vmMAC {
		t.Fatalf("after stop/start on node-b the VM's MAC is %s, want %s", got, vmMAC)
	}
	guestConfigSays("stop/start on node-b", vmAddr, vmMAC)
	mustPing(t, launcher, plainAddr.Addr())

	// 3. Live migration to node-c (a VirtualMachineInstanceMigration):
	// both launchers have the address while both run; the target keeps it
	// when the source's domain has left and its sandbox is gone.
	_, target, err := c.KV.Migrate(ctx, vmi, "node-c", framework.WhileBothRun(func(ctx context.Context, source, target *corev1.Pod) error {
		if source.UID != launcher.Pod.UID {
			return fmt.Errorf("migration source is pod %s, want the launcher %s", source.Name, launcher.Pod.Name)
		}
		box := c.Sandbox(target.UID)
		if box == nil {
			return fmt.Errorf("migration target %s has no sandbox", target.Name)
		}
		if got, err := box.Addr(ctx, iface); err != nil {
			return fmt.Errorf("migration target: %w", err)
		} else if got != vmAddr {
			return fmt.Errorf("migration target has %s, want %s", got, vmAddr)
		}
		if got, err := box.NetNS.MAC(ctx, iface); err != nil {
			return fmt.Errorf("migration target: %w", err)
		} else if got != vmMAC {
			return fmt.Errorf("migration target has MAC %s, want %s", got, vmMAC)
		}
		if got, err := launcher.Addr(ctx, iface); err != nil {
			return fmt.Errorf("migration source: %w", err)
		} else if got != vmAddr {
			return fmt.Errorf("migration source lost its address: has %s, want %s", got, vmAddr)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox(launcher.Pod.UID) != nil {
		t.Fatalf("the migration source's sandbox still runs after the migration succeeded")
	}
	targetBox := c.MustSandbox(t, target)
	if got := targetBox.MustAddr(t, iface); got != vmAddr {
		t.Fatalf("target after the source left: %s, want %s", got, vmAddr)
	}
	if got := targetBox.MustMAC(t, iface); got != vmMAC {
		t.Fatalf("target after the source left: MAC %s, want %s", got, vmMAC)
	}
	guestConfigSays("live migration to node-c", vmAddr, vmMAC)
	// The migrated VM announces itself (KubeVirt's guest sends a gratuitous
	// ARP); pinging from it does the same for the peer's neighbour table.
	mustPing(t, targetBox, plainAddr.Addr())
	mustPing(t, plain, vmAddr.Addr())
	if res := c.Reservations(t, network); len(res) != 4 {
		t.Fatalf("after migration: %d reservations, want 4", len(res))
	}
}

func mustPing(t *testing.T, s *Sandbox, ip netip.Addr) {
	t.Helper()
	if err := s.NetNS.Ping(context.Background(), ip); err != nil {
		t.Fatalf("pod %s/%s cannot reach %s: %v", s.Pod.Namespace, s.Pod.Name, ip, err)
	}
}

// Scenario 4: deleting a VM (background or foreground) deletes its claim,
// releases its reservation and hands the address to the next pod. The
// network has a single address, so the handover is observable.
func TestSystemVMDeletionReleasesAddress(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "sys-del")
	c.DumpOnFailure(t, ns)
	const network = "sys-one"
	// Two addresses: a peer pod holds one for the whole test (and answers
	// pings), the VMs and the next pods compete for the other.
	c.BridgeNAD(t, ns, "one", network, true, map[string]any{"range": "10.82.0.0/24", "range_start": "10.82.0.10", "range_end": "10.82.0.11"})
	peer := c.MustRun(t, c.PlainPod(t, ns, "peer", "node-c", "one"))
	peerAddr := peer.MustAddr(t, "net1").Addr()
	only := netip.MustParseAddr("10.82.0.10")
	if peerAddr == only {
		only = netip.MustParseAddr("10.82.0.11")
	}

	for i, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run(string(policy), func(t *testing.T) {
			vm := c.CreateVM(t, ns, "vm-"+strings.ToLower(string(policy)), framework.VMNetwork{Name: "one", NAD: "one"})
			c.WaitClaim(t, ns, vm.Name+".one")
			_, launcher := c.StartVM(t, vm, "node-a")
			if got := launcher.MustAddr(t, kubevirt.PodInterfaceName("one")); got.Addr() != only {
				t.Fatalf("VM got %s, want %s", got, only)
			}
			mustPing(t, launcher, peerAddr)
			waiting := c.PlainPod(t, ns, fmt.Sprintf("next-%d", i), "node-b", "one")
			if _, err := c.RunPod(ctx, waiting); err == nil || !strings.Contains(err.Error(), "exhausted") {
				t.Fatalf("a pod got an address while the VM holds the only one: %v", err)
			}
			claim := c.WaitClaimIPs(t, ns, vm.Name+".one")

			// virt-controller stops the VMI and deletes the launcher; the
			// kubelet's DEL runs before the claim may be released.
			if err := c.KV.DeleteVM(ctx, vm, policy); err != nil {
				t.Fatal(err)
			}
			c.WaitGone(t, claim)
			c.WaitReservations(t, network, 1) // only the peer's
			next := c.MustRun(t, c.podOf(t, waiting))
			if got := next.MustAddr(t, "net1"); got.Addr() != only {
				t.Fatalf("the next pod got %s, want the released %s", got, only)
			}
			mustPing(t, next, peerAddr)
			if err := c.CP.Client.Delete(ctx, next.Pod); err != nil {
				t.Fatal(err)
			}
			c.WaitGone(t, next.Pod)
			c.WaitReservations(t, network, 1) // the peer's
		})
	}
}

// Scenario 5: an agent killed with SIGKILL in the middle of a storm of ADDs
// and restarted: no duplicate address, and after the garbage collector runs
// no reservation outlives its pod (pods deleted while the agent was down,
// whose DEL could not run, included).
func TestSystemAgentKilledDuringStorm(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "sys-storm")
	c.DumpOnFailure(t, ns)
	const network = "sys-storm"
	c.BridgeNAD(t, ns, "storm", network, false, map[string]any{"range": "10.83.0.0/24"})
	node := c.Node("node-a")

	const n = 40
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = c.PlainPod(t, ns, fmt.Sprintf("storm-%d", i), "node-a", "storm")
	}
	var (
		mu        sync.Mutex
		succeeded int
		failed    []*corev1.Pod
		wg        sync.WaitGroup
		sem       = make(chan struct{}, 8)
		killOnce  sync.Once
		killed    = make(chan struct{})
	)
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := c.RunPod(ctx, c.podOf(t, p))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, p)
				return
			}
			succeeded++
			if succeeded == n/4 {
				killOnce.Do(func() {
					node.Agent.Kill() // SIGKILL, mid-storm
					close(killed)
				})
			}
		}()
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		t.Fatalf("only %d of %d ADDs succeeded before the agent was to be killed", succeeded, n)
	}
	if len(failed) == 0 {
		t.Fatal("every ADD succeeded although the agent was killed")
	}
	t.Logf("storm: %d ADDs succeeded, %d failed while the agent was down", succeeded, len(failed))
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	// The kubelet retries failed sandboxes.
	for _, p := range failed {
		if err := framework.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			_, err := c.RunPod(ctx, c.podOf(t, p))
			return err == nil, nil
		}); err != nil {
			t.Fatalf("pod %s never got an address after the agent came back: %v", p.Name, err)
		}
	}
	seen := map[netip.Addr]string{}
	for _, p := range pods {
		s := c.Sandbox(p.UID)
		if s == nil {
			t.Fatalf("pod %s has no sandbox", p.Name)
		}
		addr := s.MustAddr(t, "net1").Addr()
		if other, dup := seen[addr]; dup {
			t.Fatalf("pods %s and %s both have %s", other, p.Name, addr)
		}
		seen[addr] = p.Name
	}
	c.WaitReservations(t, network, n)
	first, last := c.Sandbox(pods[0].UID), c.Sandbox(pods[n-1].UID)
	mustPing(t, last, first.MustAddr(t, "net1").Addr())

	// A node crash: the agent is gone while pods are deleted, so no DEL can
	// release their addresses; the controller's garbage collector must.
	node.Agent.Kill() // returns once the process is gone
	crashed := pods[:5]
	for _, p := range crashed {
		if err := c.CP.Client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReservations(t, network, n-len(crashed))
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods[len(crashed):] {
		if err := c.CP.Client.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReservations(t, network, 0)
}

// Scenario 6: the controller is killed and restarted while VMs are created
// and deleted; the end state is right: claims for the VMs that exist, none
// for the ones deleted, and a VM started afterwards gets its address.
func TestSystemControllerRestart(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "sys-restart")
	c.DumpOnFailure(t, ns)
	c.BridgeNAD(t, ns, "blue", "sys-restart", true, map[string]any{"range": "10.84.0.0/24"})
	create := func(name string) *kubevirtv1.VirtualMachine {
		return c.CreateVM(t, ns, name, framework.VMNetwork{Name: "blue", NAD: "blue"})
	}
	before := []*kubevirtv1.VirtualMachine{create("vm-0"), create("vm-1"), create("vm-2")}
	for _, vm := range before {
		c.WaitClaim(t, ns, vm.Name+".blue")
	}

	c.Controller.Kill()
	// While it is down: one VM deleted, two created.
	if err := c.CP.Client.Delete(ctx, before[0]); err != nil {
		t.Fatal(err)
	}
	during := []*kubevirtv1.VirtualMachine{create("vm-3"), create("vm-4")}
	if err := c.Controller.Restart(); err != nil {
		t.Fatal(err)
	}
	// And again, killed right after its start, with more changes.
	if err := c.Controller.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Controller.Kill()
	if err := c.CP.Client.Delete(ctx, during[0]); err != nil {
		t.Fatal(err)
	}
	after := create("vm-5")
	if err := c.Controller.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Controller.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	for _, gone := range []*kubevirtv1.VirtualMachine{before[0], during[0]} {
		c.WaitGone(t, &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gone.Name + ".blue"}})
	}
	for _, vm := range []*kubevirtv1.VirtualMachine{before[1], before[2], during[1], after} {
		claim := c.WaitClaim(t, ns, vm.Name+".blue")
		if ref := metav1.GetControllerOf(claim); ref == nil || ref.UID != vm.UID {
			t.Fatalf("claim %s owned by %v, want VM %s", claim.Name, ref, vm.UID)
		}
	}
	_, launcher := c.StartVM(t, after, "node-b")
	addr := launcher.MustAddr(t, kubevirt.PodInterfaceName("blue"))
	peer := c.MustRun(t, c.PlainPod(t, ns, "peer", "node-a", "blue"))
	mustPing(t, peer, addr.Addr())
	claim := c.WaitClaimIPs(t, ns, after.Name+".blue")
	if !slices.Equal(claim.Status.IPs, []string{addr.String()}) {
		t.Fatalf("claim status.ips = %v, launcher has %s", claim.Status.IPs, addr)
	}
}
