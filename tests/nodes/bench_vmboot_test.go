// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// bootVMsPerNetwork is how many timed VMs the boot figure starts on each
// network, after one warm-up VM each that is not counted.
const bootVMsPerNetwork = 4

// bootRatioTarget is the figure's target: an ipkeeper VM's median boot to
// its address at most this many times the host-local VM's.
const bootRatioTarget = 1.1

// bootNetwork is one of the figure's two networks: the same bridge, the
// same VM, another IPAM.
type bootNetwork struct {
	nad, config string
	claims      bool // ipkeeper with allowPersistentIPs: the VM has an IPAMClaim
}

// bootTiming is one VM's start, each step since the VM's create call (as
// the test saw it, polling every 200 ms), the last from the container
// runtime's timestamp of the guest's first report line with an address.
type bootTiming struct {
	vmi, pod, claimFilled, podRunning, address time.Duration
	seenAfter                                  time.Duration // the report line read after its timestamp
	report                                     string
}

// BenchmarkVMBootRealNodes: the time from a VM's creation to its guest
// holding its address, a VM on an ipkeeper network with allowPersistentIPs
// against the same VM on a host-local network, in one run on the real
// nodes (docs/performance.md, figure 8). Run with -benchtime=1x (make
// bench-nodes): one lab, the VMs one at a time, alternated.
func BenchmarkVMBootRealNodes(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	l := startLab(ctx, b)
	ns := l.Namespace(ctx, b, "boot")
	nets := []bootNetwork{
		{nad: "ipk", claims: true, config: `{
  "cniVersion": "1.0.0", "name": "lab-boot-ipk", "type": "bridge", "bridge": "` + framework.NodeSecondaryBridge + `",
  "allowPersistentIPs": true, "ipam": {"type": "ipkeeper", "range": "10.215.0.0/24"}
}`},
		{nad: "hl", config: `{
  "cniVersion": "1.0.0", "name": "lab-boot-hl", "type": "bridge", "bridge": "` + framework.NodeSecondaryBridge + `",
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.216.0.0/24"}]]}
}`},
	}
	for _, n := range nets {
		l.NAD(ctx, b, ns, n.nad, n.config)
	}
	node := l.nodes[0].Name
	machine := "hardware KVM"
	if !framework.KVMWorks() {
		machine = "QEMU emulation (TCG): no hardware KVM here"
	}
	b.Logf("machine: %d CPUs, %s, guests under %s, load average %s", runtime.NumCPU(), cpuModel(), machine, loadAverage())
	b.Logf("simulated: nothing of a node (real kubelet, containerd, Multus, ipkeeper as installed, virt-handler, virt-launcher, QEMU); "+
		"%d VMs per network timed, one at a time, alternated ipkeeper/host-local, on node %s, after one warm-up VM per network (not counted)",
		bootVMsPerNetwork, node)

	times := map[string][]time.Duration{}
	b.ResetTimer()
	for round := -1; round < bootVMsPerNetwork; round++ {
		for _, n := range nets {
			name := fmt.Sprintf("%s-%d", n.nad, round+1)
			if round < 0 {
				name = n.nad + "-warmup"
			}
			bt := l.timeVMBoot(ctx, b, ns, name, node, n)
			b.Logf("%-10s address after %6.2fs (VMI %.2fs, launcher pod %.2fs, claim filled %s, pod Running %.2fs; line read %.2fs after its timestamp): %s",
				name, bt.address.Seconds(), bt.vmi.Seconds(), bt.pod.Seconds(), claimStep(n, bt), bt.podRunning.Seconds(), bt.seenAfter.Seconds(), bt.report)
			if round >= 0 {
				times[n.nad] = append(times[n.nad], bt.address)
			}
		}
	}
	b.StopTimer()

	ipkMed, ipkMax := medianMax(times["ipk"])
	hlMed, hlMax := medianMax(times["hl"])
	ratio := ipkMed.Seconds() / hlMed.Seconds()
	verdict := "met"
	if ratio > bootRatioTarget {
		verdict = "not met"
	}
	b.Logf("creation to the guest's address, %d VMs each: ipkeeper (allowPersistentIPs) median %.2fs max %.2fs %v; host-local median %.2fs max %.2fs %v; ratio of medians %.2fx (target <= %.1fx: %s)",
		bootVMsPerNetwork, ipkMed.Seconds(), ipkMax.Seconds(), rounded(times["ipk"]), hlMed.Seconds(), hlMax.Seconds(), rounded(times["hl"]), ratio, bootRatioTarget, verdict)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ipkMed.Seconds(), "ipkeeper-median-s")
	b.ReportMetric(ipkMax.Seconds(), "ipkeeper-max-s")
	b.ReportMetric(hlMed.Seconds(), "host-local-median-s")
	b.ReportMetric(hlMax.Seconds(), "host-local-max-s")
	b.ReportMetric(ratio, "ipkeeper/host-local-median-ratio")
}

// timeVMBoot creates a running VM on node with the one network n, times
// its start until its guest reports an address, then deletes it and waits
// until it and its launcher are gone.
func (l *Lab) timeVMBoot(ctx context.Context, tb testing.TB, ns, name, node string, n bootNetwork) bootTiming {
	tb.Helper()
	var bt bootTiming
	created := time.Now()
	vm := l.VM(ctx, tb, ns, name, node, n.nad)
	since := func() time.Duration { return time.Since(created) }
	var vmi kubevirtv1.VirtualMachineInstance
	var pod string
	// The steps before the guest, polled every 200 ms; the console is then
	// followed, so the address's time is the runtime's stamp of its line.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, labVMTimeout, true, func(ctx context.Context) (bool, error) {
		if bt.vmi == 0 {
			if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), &vmi); err != nil {
				return false, nil
			}
			bt.vmi = since()
		}
		if n.claims && bt.claimFilled == 0 {
			var claim ipamclaimsv1alpha1.IPAMClaim
			if err := l.cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "." + n.nad}, &claim); err == nil && len(claim.Status.IPs) > 0 {
				bt.claimFilled = since()
			}
		}
		var pods corev1.PodList
		if err := l.cp.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if bt.pod == 0 {
				bt.pod = since()
			}
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				bt.podRunning, pod = since(), p.Name
			}
		}
		return pod != "" && (!n.claims || bt.claimFilled != 0), nil
	}); err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "get", "vmi,pods,ipamclaims", "-n", ns, "-o", "wide")
		tb.Fatalf("VM %s: no running launcher pod after %s:\n%s", name, labVMTimeout, out)
	}
	stamp, line, seen, err := l.firstGuestAddress(ctx, ns, pod, created.Add(labVMTimeout))
	if err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "logs", "-n", ns, pod, "-c", "guest-console-log", "--tail", "30")
		tb.Fatalf("VM %s: no guest report with an address: %v\nconsole (tail):\n%s", name, err, out)
	}
	bt.address, bt.seenAfter, bt.report = stamp.Sub(created), seen.Sub(stamp), line
	l.DeleteVM(ctx, tb, vm)
	return bt
}

// firstGuestAddress follows the launcher pod's console container and
// returns the container runtime's timestamp of the guest's first report
// line with an IPv4 address, the line, and when it was read.
func (l *Lab) firstGuestAddress(ctx context.Context, ns, pod string, deadline time.Time) (time.Time, string, time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		stream, err := l.cp.Clientset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{
			Container: "guest-console-log", Follow: true, Timestamps: true}).Stream(ctx)
		if err == nil {
			sc := bufio.NewScanner(stream)
			sc.Buffer(make([]byte, 64*1024), 1024*1024)
			for sc.Scan() {
				ts, rest, _ := strings.Cut(sc.Text(), " ")
				if r := lastGuestReport(rest); strings.Contains(r.inet, ".") {
					_ = stream.Close()
					stamp, err := time.Parse(time.RFC3339Nano, ts)
					if err != nil {
						return time.Time{}, "", time.Time{}, fmt.Errorf("the log line's timestamp %q: %w", ts, err)
					}
					return stamp, r.line, time.Now(), nil
				}
			}
			_ = stream.Close()
		}
		// The stream ended (the container not started yet, or restarted):
		// follow it again from its start.
		select {
		case <-ctx.Done():
			return time.Time{}, "", time.Time{}, fmt.Errorf("console of %s/%s: %w (last error: %w)", ns, pod, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func claimStep(n bootNetwork, bt bootTiming) string {
	if !n.claims {
		return "-"
	}
	return fmt.Sprintf("%.2fs", bt.claimFilled.Seconds())
}

func medianMax(d []time.Duration) (time.Duration, time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m, s[len(s)-1]
}

func rounded(d []time.Duration) []string {
	var out []string
	for _, x := range d {
		out = append(out, fmt.Sprintf("%.2fs", x.Seconds()))
	}
	return out
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
