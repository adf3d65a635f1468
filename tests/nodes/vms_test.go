// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// labVMTimeout bounds a VM's start until its guest reports an address:
// the guest boots under emulation where the machine has no working KVM.
const labVMTimeout = 4 * time.Minute

// testVMOnIpkeeperNetwork: a VM with bridge binding on an ipkeeper network
// with allowPersistentIPs, run by KubeVirt's own virt-controller,
// virt-handler and virt-launcher on a real node. Its guest (a real kernel)
// asks virt-launcher's DHCP server for an address and reports what its NIC
// holds on the serial console: the claim's address, with the VMI's MAC. A
// pod on the other node reaches the guest on it.
func testVMOnIpkeeperNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := lab.Namespace(ctx, t, "vms")
	lab.NAD(ctx, t, ns, "blue", `{
  "cniVersion": "1.0.0", "name": "lab-vm-blue", "type": "bridge", "bridge": "`+framework.NodeSecondaryBridge+`",
  "allowPersistentIPs": true, "ipam": {"type": "ipkeeper", "range": "10.211.0.0/24"}
}`)
	vm := lab.VM(ctx, t, ns, "vm1", lab.nodes[0].Name, "blue")
	vmi, report := lab.WaitGuest(ctx, t, vm)
	claim, mac := lab.ClaimAndMAC(ctx, t, vmi, "blue")
	t.Logf("claim vm1.blue %v; VMI on %s, MAC %s; the guest says: %s", claim.Status.IPs, vmi.Status.NodeName, mac, report.line)
	if len(claim.Status.IPs) != 1 || report.inet != claim.Status.IPs[0] || !strings.EqualFold(report.mac, mac) || mac == "" {
		t.Fatalf("the guest holds %s with MAC %s; its claim records %v and its VMI the MAC %q", report.inet, report.mac, claim.Status.IPs, mac)
	}
	addr, _, _ := strings.Cut(report.inet, "/")
	peer := lab.Pod(ctx, t, ns, "peer", lab.nodes[1].Name, "blue")
	if out, err := lab.ExecIn(ctx, peer, "ping", "-c", "3", "-W", "3", addr); err != nil {
		t.Fatalf("a pod on %s cannot reach the guest at %s: %v\n%s", lab.nodes[1].Name, addr, err, out)
	}

	// Stop, then start on the other node: the guest there holds the same
	// address and MAC.
	before := report
	lab.RestartVMOn(ctx, t, vm, lab.nodes[1].Name)
	vmi, report = lab.WaitGuest(ctx, t, vm)
	t.Logf("after a stop and a start on %s, the guest says: %s", vmi.Status.NodeName, report.line)
	if vmi.Status.NodeName != lab.nodes[1].Name || report.inet != before.inet || !strings.EqualFold(report.mac, before.mac) {
		t.Fatalf("after a stop and a start: the guest on %s holds %s with MAC %s; before, on %s, %s with MAC %s",
			vmi.Status.NodeName, report.inet, report.mac, lab.nodes[0].Name, before.inet, before.mac)
	}
}

// ClaimAndMAC reads the claim of the VMI's network and the MAC its status
// reports for that network's interface.
func (l *Lab) ClaimAndMAC(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, network string) (*ipamclaimsv1alpha1.IPAMClaim, string) {
	t.Helper()
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := l.cp.Client.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: vmi.Name + "." + network}, &claim); err != nil {
		t.Fatalf("the VM's claim of network %s: %v", network, err)
	}
	for _, i := range vmi.Status.Interfaces {
		if i.Name == network {
			return &claim, i.MAC
		}
	}
	return &claim, ""
}

// RestartVMOn stops the VM, waits until its VMI and launchers are gone
// (their DEL done by the kubelet), and starts it again pinned to node.
func (l *Lab) RestartVMOn(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine, node string) {
	t.Helper()
	halted, always := kubevirtv1.RunStrategyHalted, kubevirtv1.RunStrategyAlways
	set := func(rs *kubevirtv1.VirtualMachineRunStrategy, selector map[string]string) {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
				return false, nil
			}
			vm.Spec.RunStrategy = rs
			if selector != nil {
				vm.Spec.Template.Spec.NodeSelector = selector
			}
			return l.cp.Client.Update(ctx, vm) == nil, nil
		}); err != nil {
			t.Fatalf("updating VM %s: %v", vm.Name, err)
		}
	}
	set(&halted, nil)
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var vmi kubevirtv1.VirtualMachineInstance
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), &vmi); err == nil {
			return false, nil
		}
		var pods corev1.PodList
		if err := l.cp.Client.List(ctx, &pods, client.InNamespace(vm.Namespace), client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"}); err != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	}); err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "get", "vmi,pods", "-n", vm.Namespace, "-o", "wide")
		t.Fatalf("VM %s did not stop after 2m: its VMI or launcher pods remain:\n%s", vm.Name, out)
	}
	set(&always, map[string]string{corev1.LabelHostname: node})
}

// guestReport is the guest's latest report line (framework.GuestReportPrefix);
// inet6 only from the cloud-init guest.
type guestReport struct {
	line, iface, mac, inet, inet6 string
}

// VM creates a running VM on node (any node for "") with bridge-bound interfaces on the
// NADs (the network named as the NAD) and no pod network; its guest is
// framework.GuestImage, booted by KubeVirt's kernel boot.
func (l *Lab) VM(ctx context.Context, t testing.TB, ns, name, node string, nads ...string) *kubevirtv1.VirtualMachine {
	t.Helper()
	return l.vm(ctx, t, ns, name, node, nil, nads...)
}

// vm is VM with edit (nil: none) applied to the VM before it is created.
func (l *Lab) vm(ctx context.Context, t testing.TB, ns, name, node string, edit func(*kubevirtv1.VirtualMachine), nads ...string) *kubevirtv1.VirtualMachine {
	t.Helper()
	var networks []framework.VMNetwork
	for _, n := range nads {
		networks = append(networks, framework.VMNetwork{Name: n, NAD: n})
	}
	vm := framework.NewVM(ns, name, networks...)
	spec := &vm.Spec.Template.Spec
	spec.Networks, spec.Domain.Devices.Interfaces = spec.Networks[1:], spec.Domain.Devices.Interfaces[1:] // no pod network
	if node != "" {
		spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	// Stopped at once, as a power-off: the guest's init handles no ACPI
	// shutdown, so a grace period would only be waited out.
	spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	spec.Domain.Firmware.KernelBoot = &kubevirtv1.KernelBoot{KernelArgs: "console=ttyS0 panic=-1",
		Container: &kubevirtv1.KernelBootContainer{Image: framework.GuestImage, KernelPath: framework.GuestKernelPath,
			InitrdPath: framework.GuestInitrdPath, ImagePullPolicy: corev1.PullNever}}
	always := kubevirtv1.RunStrategyAlways
	vm.Spec.RunStrategy = &always
	if edit != nil {
		edit(vm)
	}
	if err := l.cp.Client.Create(ctx, vm); err != nil {
		t.Fatalf("creating VM %s/%s: %v", ns, name, err)
	}
	return vm
}

// WaitGuest waits until the VM's VMI runs and its guest reports an IPv4
// address, and returns the VMI and the report.
func (l *Lab) WaitGuest(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, guestReport) {
	t.Helper()
	return l.WaitGuestOn(ctx, t, vm, "")
}

// WaitGuestOn is WaitGuest for a VMI that runs on node ("": any), read
// from the console of its launcher there.
func (l *Lab) WaitGuestOn(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine, node string) (*kubevirtv1.VirtualMachineInstance, guestReport) {
	t.Helper()
	vmi, report, _ := l.waitGuestReport(ctx, t, vm, node, func(r guestReport) bool { return strings.Contains(r.inet, ".") })
	return vmi, report
}

// waitGuestReport waits until the VMI runs on node ("": any) and its
// guest's latest report is done, and returns the VMI, the report and the
// console so far.
func (l *Lab) waitGuestReport(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine, node string, done func(guestReport) bool) (*kubevirtv1.VirtualMachineInstance, guestReport, string) {
	t.Helper()
	var vmi kubevirtv1.VirtualMachineInstance
	var report guestReport
	var console string
	err := wait.PollUntilContextTimeout(ctx, time.Second, labVMTimeout, true, func(ctx context.Context) (bool, error) {
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), &vmi); err != nil || vmi.Status.Phase != kubevirtv1.Running ||
			(node != "" && vmi.Status.NodeName != node) {
			return false, nil
		}
		pod := l.launcherOn(ctx, &vmi, vmi.Status.NodeName)
		if pod == "" {
			return false, nil
		}
		out, err := l.cp.Kubectl(ctx, nil, "logs", "-n", vm.Namespace, pod, "-c", "guest-console-log")
		if err != nil {
			return false, nil
		}
		console = string(out)
		report = lastGuestReport(console)
		return done(report), nil
	})
	if err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "get", "vmi,pods,ipamclaims,ipreservations", "-n", vm.Namespace, "-o", "wide")
		t.Fatalf("VM %s: no guest report with an address after %s (VMI phase %s on %q, want %q):\n%s\nconsole (tail):\n%s",
			vm.Name, labVMTimeout, vmi.Status.Phase, vmi.Status.NodeName, node, out, tailLines(console, 30))
	}
	return &vmi, report, console
}

// lastGuestReport parses the last report line of the guest's console.
func lastGuestReport(console string) guestReport {
	var r guestReport
	for _, line := range strings.Split(console, "\n") {
		i := strings.Index(line, framework.GuestReportPrefix+" ")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[i:])
		if len(f) < 4 {
			continue
		}
		r = guestReport{line: strings.TrimSpace(line[i:]), iface: f[1], mac: strings.TrimPrefix(f[2], "mac="), inet: strings.TrimPrefix(f[3], "inet=")}
		if len(f) > 4 {
			r.inet6 = strings.TrimPrefix(f[4], "inet6=")
		}
	}
	return r
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
