// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The coexistence cluster: its own control plane, where KubeVirt's real
// ipam-extensions (built by `make tools` from its v0.6.0 source) runs next
// to ipkeeper, as on a cluster the network addons operator or OpenShift
// Virtualization installed. It is apart from the shared cluster because
// ipam-extensions acts on every VM of the cluster it runs in.
var coexist struct {
	once sync.Once
	c    *Cluster
	ext  *framework.IPAMExtensions
	err  error
	stop func()
}

// coexistence starts (once) and returns the coexistence cluster, with
// ipkeeper-controller at its default --claims-controller=auto.
func coexistence(t *testing.T) (*Cluster, *framework.IPAMExtensions) {
	t.Helper()
	setup(t)
	coexist.once.Do(func() {
		ctx := context.Background()
		cp, err := framework.Start(ctx, framework.Options{VirtController: true})
		if err != nil {
			coexist.err = fmt.Errorf("starting the coexistence control plane: %w", err)
			return
		}
		// Inside the run's directory: kept with it when the run fails.
		dir, err := os.MkdirTemp(filepath.Dir(cluster.dir), "cx-")
		if err != nil {
			coexist.err = err
			return
		}
		c, err := StartClusterWith(ctx, cp, cluster.bins, dir, []string{"--claims-controller-check-interval=1s"}, "node-x", "node-y")
		if err != nil {
			coexist.err = fmt.Errorf("starting the coexistence cluster: %w", err)
			_ = cp.Stop()
			return
		}
		coexist.stop = func() {
			if coexist.ext != nil {
				coexist.ext.Stop()
			}
			c.Stop()
			_ = cp.Stop()
		}
		coexist.c = c
		if coexist.ext, err = cp.StartIPAMExtensions(ctx); err != nil {
			coexist.err = err
			return
		}
		// ipkeeper-controller (auto) sees the webhook within its check
		// interval and says so in an Event on the webhook's configuration.
		if err := waitMakerEvent(ctx, cp, coexist.ext.WebhookConfig, "leaves VMs' IPAMClaims"); err != nil {
			coexist.err = fmt.Errorf("ipkeeper-controller did not leave claims to ipam-extensions: %w", err)
		}
	})
	if coexist.err != nil {
		t.Fatal(coexist.err)
	}
	return coexist.c, coexist.ext
}

// waitMakerEvent waits for ipkeeper-controller's IPAMClaimsMaker Event on
// the MutatingWebhookConfiguration config whose message contains text.
func waitMakerEvent(ctx context.Context, cp *framework.ControlPlane, config, text string) error {
	return framework.Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := cp.Client.List(ctx, &events); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "MutatingWebhookConfiguration" && e.InvolvedObject.Name == config &&
				e.Reason == string(claimmaker.ReasonClaimsMaker) && strings.Contains(e.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
}

// stopCoexistence tears the coexistence cluster down, if it was started.
func stopCoexistence() {
	if coexist.stop != nil {
		coexist.stop()
	}
}

// madeByExtensions checks that a claim is ipam-extensions' (its label and
// finalizer, no ipkeeper label) and returns it.
func madeByExtensions(t *testing.T, c *Cluster, ns, name string, vm *kubevirtv1.VirtualMachine) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	claim := c.WaitClaimIPs(t, ns, name)
	if claimowner.Managed(claim) || claim.Labels[kubevirtv1.VirtualMachineLabel] != vm.Name || !controllerutil.ContainsFinalizer(claim, claims.Finalizer) {
		t.Fatalf("IPAMClaim %s: labels %v finalizers %v, want ipam-extensions' (label %s=%s, finalizer %s) and not ipkeeper's", name, claim.Labels, claim.Finalizers, kubevirtv1.VirtualMachineLabel, vm.Name, claims.Finalizer)
	}
	if ref := metav1.GetControllerOf(claim); ref == nil || ref.UID != vm.UID {
		t.Fatalf("IPAMClaim %s owned by %v, want VM %s", name, ref, vm.UID)
	}
	return claim
}

// onlyClaims fails unless the namespace's claims are exactly names.
func onlyClaims(t *testing.T, c *Cluster, ns string, names ...string) {
	t.Helper()
	var list ipamclaimsv1alpha1.IPAMClaimList
	if err := c.CP.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cl := range list.Items {
		got = append(got, cl.Name)
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("IPAMClaims in %s: %v, want exactly %v (one maker, one claim per VM network)", ns, got, names)
	}
}

// The real ipam-extensions and ipkeeper on one cluster (real virt-controller
// and Multus; kubelet and virt-handler simulated, see KubeVirt.Simulated):
// ipam-extensions makes the claims and the launchers' references, ipkeeper
// fills the addresses, and nothing fights. Then ipam-extensions is removed
// and ipkeeper takes its claims over without renumbering anything.
func TestCoexistWithIPAMExtensions(t *testing.T) {
	c, ext := coexistence(t)
	ctx := context.Background()
	t.Log(c.KV.Simulated())
	ns := c.NewNamespace(t, "coexist")
	c.BridgeNAD(t, ns, "blue", ns+"-blue", true, map[string]any{"range": "10.86.0.0/24"})
	c.BridgeNAD(t, ns, "red", ns+"-red", true, map[string]any{"range": "10.86.1.0/24"})
	iface := kubevirt.PodInterfaceName("blue")
	// A logical network name that is not an object name: ipam-extensions
	// lowercases and cuts it where ipkeeper would hash it.
	const odd = "Odd_Net"
	oddClaim := naming.ExtensionsClaim("vm2", odd)
	if oddClaim == naming.Claim("vm2", odd) {
		t.Fatalf("the test needs a name the two tools give different claims (%s)", oddClaim)
	}

	var vm1, vm2, vm3 *kubevirtv1.VirtualMachine
	var vm1Addr, vm2Addr string
	t.Run("start", func(t *testing.T) {
		vm1 = c.CreateVM(t, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
		_, launcher := c.StartVM(t, vm1, "node-x")
		claim := madeByExtensions(t, c, ns, "vm1.blue", vm1)
		vm1Addr = launcher.MustAddr(t, iface).String()
		if !slices.Equal(claim.Status.IPs, []string{vm1Addr}) {
			t.Fatalf("claim status.ips %v, launcher has %s", claim.Status.IPs, vm1Addr)
		}
		refs := launcherRefs(t, c, launcher.Pod)
		if !slices.Equal(refs, []string{"vm1.blue"}) {
			t.Fatalf("launcher claim references %v, want [vm1.blue]", refs)
		}
		onlyClaims(t, c, ns, "vm1.blue")
		// kubectl ipkeeper why vm tells who makes the claims.
		var out, errOut bytes.Buffer
		if code := cli.Main(ctx, []string{"why", "vm", "-n", ns, "vm1", "--kubeconfig", c.CP.KubeconfigPath}, cli.Streams{Out: &out, Err: &errOut}); code != 0 {
			t.Fatalf("kubectl ipkeeper why vm: exit %d: %s", code, errOut.String())
		}
		for _, want := range []string{"another IPAMClaims controller: webhook " + claimmaker.ExtensionsWebhook, "made by another IPAMClaims controller", vm1Addr} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("kubectl ipkeeper why vm lacks %q:\n%s", want, out.String())
			}
		}
	})
	t.Run("odd network name", func(t *testing.T) {
		vm2 = c.CreateVM(t, ns, "vm2", framework.VMNetwork{Name: odd, NAD: "red"})
		_, launcher := c.StartVM(t, vm2, "node-y")
		claim := madeByExtensions(t, c, ns, oddClaim, vm2)
		vm2Addr = launcher.MustAddr(t, kubevirt.PodInterfaceName(odd)).String()
		if !slices.Equal(claim.Status.IPs, []string{vm2Addr}) {
			t.Fatalf("claim %s status.ips %v, launcher has %s", oddClaim, claim.Status.IPs, vm2Addr)
		}
		onlyClaims(t, c, ns, "vm1.blue", oddClaim)
	})
	t.Run("stop and start on another node", func(t *testing.T) {
		if err := c.KV.Stop(ctx, vm1); err != nil {
			t.Fatal(err)
		}
		_, launcher := c.StartVM(t, vm1, "node-y")
		if got := launcher.MustAddr(t, iface).String(); got != vm1Addr {
			t.Fatalf("after stop/start vm1 has %s, want %s", got, vm1Addr)
		}
		onlyClaims(t, c, ns, "vm1.blue", oddClaim)
	})
	t.Run("live migration", func(t *testing.T) {
		var vmi kubevirtv1.VirtualMachineInstance
		if err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm1"}, &vmi); err != nil {
			t.Fatal(err)
		}
		_, target, err := c.KV.Migrate(ctx, &vmi, "node-x")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.MustSandbox(t, target).MustAddr(t, iface).String(); got != vm1Addr {
			t.Fatalf("the migration target has %s, want %s", got, vm1Addr)
		}
	})
	t.Run("hotplug and unplug", func(t *testing.T) {
		pod, err := c.KV.Hotplug(ctx, vm1, framework.VMNetwork{Name: "red", NAD: "red"})
		if err != nil {
			t.Fatal(err)
		}
		madeByExtensions(t, c, ns, "vm1.red", vm1)
		if refs := launcherRefs(t, c, pod); !slices.Equal(refs, []string{"vm1.blue", "vm1.red"}) {
			t.Fatalf("after the hotplug the launcher references %v", refs)
		}
		if err := c.KV.Unplug(ctx, vm1, "red"); err != nil {
			t.Fatal(err)
		}
		// ipam-extensions releases claims only with their VM: the unplugged
		// network's claim stays, and ipkeeper (not its maker) leaves it.
		if cl := c.WaitClaimIPs(t, ns, "vm1.red"); cl.DeletionTimestamp != nil {
			t.Fatalf("ipkeeper released ipam-extensions' claim vm1.red after the unplug")
		}
	})

	// ipkeeper-controller (re)started after ipam-extensions made a running
	// VM's claim: the claim gains its addresses, the launcher waiting for
	// them starts, and the running VMs' claims keep theirs.
	t.Run("ipkeeper started after the claims", func(t *testing.T) {
		before := c.WaitClaimIPs(t, ns, oddClaim).Status.IPs
		c.Controller.Kill()
		vm4 := c.CreateVM(t, ns, "vm4", framework.VMNetwork{Name: "blue", NAD: "blue"})
		type started struct {
			pod *corev1.Pod
			err error
		}
		done := make(chan started, 1)
		go func() {
			_, pod, err := c.KV.Start(ctx, vm4, "node-x")
			done <- started{pod, err}
		}()
		claim := c.WaitClaim(t, ns, "vm4.blue")
		if len(claim.Status.IPs) > 0 || claimowner.Managed(claim) {
			t.Fatalf("with ipkeeper-controller down, vm4.blue has ips %v labels %v", claim.Status.IPs, claim.Labels)
		}
		if err := c.Controller.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := c.Controller.WaitReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		claim = madeByExtensions(t, c, ns, "vm4.blue", vm4)
		if got := c.MustSandbox(t, res.pod).MustAddr(t, iface).String(); !slices.Equal(claim.Status.IPs, []string{got}) {
			t.Fatalf("vm4's launcher has %s, its claim %v", got, claim.Status.IPs)
		}
		if after := c.WaitClaimIPs(t, ns, oddClaim).Status.IPs; !slices.Equal(after, before) {
			t.Fatalf("the running vm2's claim went from %v to %v across the controller restart", before, after)
		}
		if err := c.KV.DeleteVM(ctx, vm4, metav1.DeletePropagationBackground); err != nil {
			t.Fatal(err)
		}
		c.WaitGone(t, claim)
	})

	// ipam-extensions removed while ipkeeper stays: ipkeeper adopts the
	// claims (its label; the finalizer has the same name) and makes new
	// ones; the running VMs keep their addresses, also after a restart.
	t.Run("ipam-extensions removed", func(t *testing.T) {
		if err := ext.Uninstall(ctx); err != nil {
			t.Fatal(err)
		}
		if err := waitMakerEvent(ctx, c.CP, ext.WebhookConfig, "is gone"); err != nil {
			t.Fatalf("ipkeeper-controller did not take claims over: %v", err)
		}
		for _, name := range []string{"vm1.blue", oddClaim} {
			if err := framework.Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
				var cl ipamclaimsv1alpha1.IPAMClaim
				err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cl)
				return err == nil && claimowner.Managed(&cl), err
			}); err != nil {
				t.Fatalf("ipkeeper did not adopt IPAMClaim %s: %v", name, err)
			}
		}
		if err := c.KV.Stop(ctx, vm2); err != nil {
			t.Fatal(err)
		}
		_, launcher := c.StartVM(t, vm2, "node-x")
		if got := launcher.MustAddr(t, kubevirt.PodInterfaceName(odd)).String(); got != vm2Addr {
			t.Fatalf("after ipkeeper took over, vm2 restarted with %s, want %s", got, vm2Addr)
		}
		if refs := launcherRefs(t, c, launcher.Pod); !slices.Equal(refs, []string{oddClaim}) {
			t.Fatalf("vm2's launcher references %v, want ipam-extensions' claim %s", refs, oddClaim)
		}
		vm3 = c.CreateVM(t, ns, "vm3", framework.VMNetwork{Name: "blue", NAD: "blue"})
		if cl := c.WaitClaim(t, ns, "vm3.blue"); !claimowner.Managed(cl) {
			t.Fatalf("vm3's claim was not made by ipkeeper: labels %v", cl.Labels)
		}
		if strings.Contains(strings.Join(claimNames(t, c, ns), ","), naming.Claim("vm2", odd)) {
			t.Fatalf("ipkeeper made a second claim %s for vm2", naming.Claim("vm2", odd))
		}
	})
	t.Run("VM deletion", func(t *testing.T) {
		for vm, p := range map[*kubevirtv1.VirtualMachine]metav1.DeletionPropagation{
			vm1: metav1.DeletePropagationForeground, vm2: metav1.DeletePropagationBackground, vm3: metav1.DeletePropagationOrphan,
		} {
			if err := c.KV.DeleteVM(ctx, vm, p); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"vm1.blue", "vm1.red", oddClaim, "vm3.blue"} {
			c.WaitGone(t, &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		}
		c.WaitReservations(t, ns+"-red", 0)
	})
}

// launcherRefs are the claim references of a launcher pod's networks.
func launcherRefs(t *testing.T, c *Cluster, pod *corev1.Pod) []string {
	t.Helper()
	var live corev1.Pod
	if err := c.CP.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &live); err != nil {
		t.Fatal(err)
	}
	refs := multus.ClaimRefs(live.Annotations[multus.Annotation], live.Namespace)
	slices.Sort(refs)
	return refs
}

func claimNames(t *testing.T, c *Cluster, ns string) []string {
	t.Helper()
	var list ipamclaimsv1alpha1.IPAMClaimList
	if err := c.CP.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cl := range list.Items {
		names = append(names, cl.Name)
	}
	return names
}
