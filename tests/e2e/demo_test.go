// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestDemo is `make demo`: a guided walk through scenarios 1-4 on the
// Cluster, printing what happened at each step when IPKEEPER_DEMO is set.
// CI runs it silently, so a broken demo (or example manifest) fails there;
// it asserts the same facts as the system tests.
func TestDemo(t *testing.T) {
	out := io.Discard
	if os.Getenv("IPKEEPER_DEMO") != "" {
		out = os.Stdout
	}
	c := setup(t)
	ctx := context.Background()
	const ns = "demo"
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.CP.Client.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CP.Client.Delete(context.Background(), nsObj) })
	c.DumpOnFailure(t, ns)
	DeleteHostLinkOnCleanup(t, "br-blue")
	DeleteHostLinkOnCleanup(t, "br-red")
	say := func(format string, args ...any) { fmt.Fprintf(out, "\n\033[1m==> "+format+"\033[0m\n", args...) }
	show := func(args ...string) {
		fmt.Fprintf(out, "$ kubectl %s\n", strings.Join(args, " "))
		res, err := c.CP.Kubectl(ctx, nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(out, string(res))
	}
	guest := func(s *Sandbox, ifname string) string {
		addr := s.MustAddr(t, ifname)
		shown, err := ipCmd(ctx, "-n", s.NetNS.Name, "-br", "-4", "addr", "show", "dev", ifname)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "$ ip -n %s -br -4 addr show dev %s    # pod %s on %s\n%s", s.NetNS.Name, ifname, s.Pod.Name, s.Node.Name, shown)
		return addr.String()
	}

	say("What runs here")
	fmt.Fprintln(out, `Real: etcd, kube-apiserver, kube-controller-manager (garbage collector), KubeVirt's virt-controller
(it turns the VM into a VMI and launcher pods, and runs the live migration), ipkeeper-controller
(claims controller, pod webhook, reservation garbage collector) and three ipkeeper-agent processes
standing for nodes node-a, node-b and node-c; Multus (thin plugin) -> bridge -> ipkeeper in Linux
network namespaces on this machine.
Simulated (no VM can run here): the scheduler's binding and the kubelet (the demo creates each
pod's network namespace and runs Multus as the kubelet would), and virt-handler (the VMI's status
and the migration's progress, as a node would report them). The "guest-side address" is the
address on the launcher pod's interface for the VM network, which KubeVirt's bridge binding hands
to the guest.`)

	say("1. A NetworkAttachmentDefinition with allowPersistentIPs, and a VM (docs/examples)")
	show("apply", "-n", ns, "-f", repoFile(t, "docs/examples/nad-blue.yaml"), "-f", repoFile(t, "docs/examples/vm-blue.yaml"))
	c.WaitClaim(t, ns, "vm-blue.blue")
	fmt.Fprintln(out, "The controller made the VM's IPAMClaim before the VM runs:")
	show("get", "vm,ipamclaims", "-n", ns)

	var vm kubevirtv1.VirtualMachine
	if err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm-blue"}, &vm); err != nil {
		t.Fatal(err)
	}
	say("Start the VM: its launcher pod runs on node-a")
	_, launcher := c.StartVM(t, &vm, "node-a")
	iface := kubevirt.PodInterfaceName("blue")
	vmAddr := guest(launcher, iface)
	c.WaitClaimIPs(t, ns, "vm-blue.blue")
	show("get", "ipamclaims,ipreservations", "-n", ns)
	say("A plain pod on the same network, on node-b, gets another address and reaches the VM")
	plain := c.MustRun(t, c.PlainPod(t, ns, "plain", "node-b", "blue"))
	plainAddr := guest(plain, "net1")
	fmt.Fprintf(out, "$ ip netns exec %s ping -c1 %s\n", plain.NetNS.Name, strings.Split(vmAddr, "/")[0])
	mustPing(t, plain, launcher.MustAddr(t, iface).Addr())
	fmt.Fprintln(out, "reply received")
	say("The network's pool: created from the NAD on first use, its usage kept by the controller")
	c.WaitPoolUsage(t, "tenant-blue", "254", 2)
	show("get", "ippools")
	say("A network defined by an IPPool (docs/examples): the NAD names the pool; a pod on node-c")
	show("apply", "-f", repoFile(t, "docs/examples/ippool-red.yaml"))
	t.Cleanup(func() {
		// Not waited for: the pool goes once its last address has cooled down.
		_, _ = c.CP.Kubectl(context.Background(), nil, "delete", "--ignore-not-found", "--wait=false", "-f", repoFile(t, "docs/examples/ippool-red.yaml"))
	})
	show("apply", "-n", ns, "-f", repoFile(t, "docs/examples/nad-red.yaml"))
	red := c.MustRun(t, c.PlainPod(t, ns, "plain-red", "node-c", "red"))
	if got := guest(red, "net1"); !strings.HasPrefix(got, "10.201.0.") {
		t.Fatalf("the pod on the red pool got %s, want an address of 10.201.0.10-59", got)
	}
	c.WaitPoolUsage(t, "red", "50", 1)
	show("get", "ippools")

	say("2. Stop the VM and start it again; the new launcher pod lands on node-b")
	if err := c.KV.Stop(ctx, &vm); err != nil {
		t.Fatal(err)
	}
	c.WaitGone(t, launcher.Pod)
	show("get", "ipamclaims,ipreservations", "-n", ns)
	vmi, launcher := c.StartVM(t, &vm, "node-b")
	if got := guest(launcher, iface); got != vmAddr {
		t.Fatalf("after restart the VM has %s, want %s", got, vmAddr)
	}
	fmt.Fprintln(out, "Same address.")

	say("3. Live migration to node-c: the target launcher gets the address while the source still runs")
	fmt.Fprintln(out, "(a VirtualMachineInstanceMigration of vm-blue is created; virt-controller makes the target pod)")
	_, target, err := c.KV.Migrate(ctx, vmi, "node-c", framework.WhileBothRun(func(ctx context.Context, _, target *corev1.Pod) error {
		box := c.Sandbox(target.UID)
		if box == nil {
			return fmt.Errorf("migration target %s has no sandbox", target.Name)
		}
		if got := guest(box, iface); got != vmAddr {
			return fmt.Errorf("migration target has %s, want %s", got, vmAddr)
		}
		show("get", "pods", "-n", ns, "-o", "wide")
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	say("The migration succeeded and the source's domain left; the target keeps the address")
	show("get", "vmim,pods", "-n", ns)
	targetBox := c.MustSandbox(t, target)
	guest(targetBox, iface)
	mustPing(t, targetBox, plain.MustAddr(t, "net1").Addr())
	show("get", "ipamclaims", "-n", ns)

	say("4. Delete the VM: the claim goes, the reservation is released")
	fmt.Fprintln(out, "$ kubectl delete vm vm-blue")
	if err := c.KV.DeleteVM(ctx, &vm, metav1.DeletePropagationBackground); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		names, err := c.CP.Kubectl(ctx, nil, "get", "ipamclaims", "-n", ns, "-o", "name")
		return err == nil && strings.TrimSpace(string(names)) == "", nil
	}); err != nil {
		t.Fatalf("claims left in %s: %v", ns, err)
	}
	c.WaitReservations(t, "tenant-blue", 1)
	c.WaitPoolUsage(t, "tenant-blue", "254", 1)
	show("get", "vm,ipamclaims,ipreservations", "-n", ns)
	show("get", "ippools")
	fmt.Fprintf(out, "Only the plain pod's address (%s) is still reserved.\n", plainAddr)
	say("Done; cleaning up")
}
