// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// testVMGuestNetworkConfig: a VM on a dual-stack ipkeeper network that asks
// for its guest network configuration (ipkeeper.io/guest-network-config)
// and hands ipkeeper's Secret to cloud-init as its NoCloud network data.
// The guest runs Debian's cloud-init (framework.CloudInitGuestImage), no
// DHCP client: the IPv4 and IPv6 addresses its NIC holds are those
// cloud-init rendered from the Secret, and they are the claim's. A pod on
// the other node reaches the guest on both.
func testVMGuestNetworkConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	ns := lab.Namespace(ctx, t, "guestnet")
	lab.NAD(ctx, t, ns, "dual", `{
  "cniVersion": "1.0.0", "name": "lab-guestnet-dual", "type": "bridge", "bridge": "`+framework.NodeSecondaryBridge+`",
  "allowPersistentIPs": true,
  "ipam": {"type": "ipkeeper", "range": "10.214.0.0/24", "ipRanges": [{"range": "fd00:214::/120"}]}
}`)
	vm := lab.vm(ctx, t, ns, "vm-ci", lab.nodes[0].Name, cloudInitGuest, "dual")
	secret := lab.WaitGuestNetworkSecret(ctx, t, vm)
	t.Logf("ipkeeper's Secret %s/%s, networkdata:\n%s", ns, secret.Name, secret.Data["networkdata"])

	start := time.Now()
	vmi, report, console := lab.waitGuestReport(ctx, t, vm, "", func(r guestReport) bool {
		return strings.Contains(r.inet, ".") && strings.Contains(r.inet6, ":")
	})
	t.Logf("the guest configured by its cloud-init %s after its VMI ran: %s", time.Since(start).Round(time.Second), report.line)
	claim, mac := lab.ClaimAndMAC(ctx, t, vmi, "dual")
	if len(claim.Status.IPs) != 2 || !slices.Contains(claim.Status.IPs, report.inet) || !slices.Contains(claim.Status.IPs, report.inet6) ||
		!strings.EqualFold(report.mac, mac) || mac == "" {
		t.Fatalf("the guest holds %s and %s with MAC %s; its claim records %v and its VMI the MAC %q\nconsole (tail):\n%s",
			report.inet, report.inet6, report.mac, claim.Status.IPs, mac, tailLines(console, 40))
	}
	// What cloud-init rendered (the guest prints it): the claim's addresses,
	// statically, so ifupdown, not a DHCP client, gave them to the NIC.
	_, rendered, ok := strings.Cut(console, framework.GuestReportPrefix+"-LOG what cloud-init rendered")
	if !ok {
		t.Fatalf("the guest printed no rendering of cloud-init's:\n%s", tailLines(console, 40))
	}
	for _, a := range claim.Status.IPs {
		if !strings.Contains(rendered, "address "+a) {
			t.Fatalf("cloud-init's rendering does not list address %s:\n%s", a, tailLines(rendered, 30))
		}
	}
	t.Logf("cloud-init's rendering for ifupdown:\n%s", renderedSection(rendered))

	peer := lab.Pod(ctx, t, ns, "peer", lab.nodes[1].Name, "dual")
	for _, a := range claim.Status.IPs {
		addr, _, _ := strings.Cut(a, "/")
		var out []byte
		// The peer's own IPv6 address may still be in duplicate address
		// detection for a moment.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			out, err = lab.ExecIn(ctx, peer, "ping", "-c", "2", "-W", "3", addr)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("a pod on %s cannot reach the guest at %s: %v\n%s", lab.nodes[1].Name, addr, err, out)
		}
	}
	t.Logf("a pod on %s reaches the guest at %v", lab.nodes[1].Name, claim.Status.IPs)
}

// cloudInitGuest makes a lab VM the cloud-init guest with ipkeeper's guest
// network configuration as its NoCloud network data (docs/kubevirt.md,
// Guest network configuration), and the memory its initramfs needs.
func cloudInitGuest(vm *kubevirtv1.VirtualMachine) {
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{}
	}
	vm.Annotations["ipkeeper.io/guest-network-config"] = "true"
	spec := &vm.Spec.Template.Spec
	spec.Domain.Firmware.KernelBoot.Container.Image = framework.CloudInitGuestImage
	mem := resource.MustParse("1Gi")
	spec.Domain.Memory.Guest = &mem
	spec.Domain.Resources.Requests[corev1.ResourceMemory] = mem
	spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, kubevirtv1.Disk{Name: "cloudinit",
		DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}})
	spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{
		CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{NetworkDataSecretRef: &corev1.LocalObjectReference{Name: vm.Name + "-ipkeeper-network"}}}})
}

// WaitGuestNetworkSecret waits for ipkeeper-controller's guest network
// configuration Secret of vm.
func (l *Lab) WaitGuestNetworkSecret(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine) *corev1.Secret {
	t.Helper()
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: vm.Namespace, Name: vm.Name + "-ipkeeper-network"}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return l.cp.Client.Get(ctx, key, &secret) == nil, nil
	}); err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "get", "vm,ipamclaims,events", "-n", vm.Namespace, "-o", "wide")
		t.Fatalf("no Secret %s after 1m:\n%s", key, out)
	}
	return &secret
}

// renderedSection is the guest's print of what cloud-init rendered, up to
// its next report line.
func renderedSection(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, framework.GuestReportPrefix) {
			break
		}
		out = append(out, strings.TrimRight(line, "\r"))
	}
	return strings.Join(out, "\n")
}
