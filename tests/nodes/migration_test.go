// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkv1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// labMigrationTimeout bounds one live migration, from the migration
// object's creation to its end, under emulation.
const labMigrationTimeout = 4 * time.Minute

// pingInterval is the watcher's ping interval: the migration's downtime
// is measured in its steps.
const pingInterval = 200 * time.Millisecond

// testVMLiveMigration: a VM on an ipkeeper network with allowPersistentIPs
// live-migrates to the other node with KubeVirt's own migration
// (virt-controller's target launcher, virt-handler's migration proxies,
// libvirt's and QEMU's migration). The guest on the target holds the same
// address and MAC, a ping and a TCP stream from a pod on the L2 network
// keep going (their loss and the longest gap are reported), and the source
// launcher's DEL releases nothing of the claim.
func testVMLiveMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ns := lab.Namespace(ctx, t, "migrate")
	// One address: a second VM on the network finds it taken or the pool
	// exhausted. A cooldown: a deleted VM's address is held for nobody a
	// while, then freed.
	lab.Apply(ctx, t, `apiVersion: ipkeeper.io/v1alpha1
kind: IPPool
metadata:
  name: `+ns+`
spec:
  ranges:
    - {range: 10.212.0.0/24, range_start: 10.212.0.10, range_end: 10.212.0.10}
  reuseCooldown: 5s
`)
	t.Cleanup(func() { _, _ = lab.cp.Kubectl(context.Background(), nil, "delete", "ippool", ns, "--wait=false") })
	lab.NAD(ctx, t, ns, "blue", `{
  "cniVersion": "1.0.0", "name": "`+ns+`", "type": "bridge", "bridge": "`+framework.NodeSecondaryBridge+`",
  "allowPersistentIPs": true, "ipam": {"type": "ipkeeper", "pool": "`+ns+`"}
}`)
	// The watcher pod's network: the same L2 segment and subnet, its own
	// pool.
	lab.NAD(ctx, t, ns, "watch", `{
  "cniVersion": "1.0.0", "name": "`+ns+`-watch", "type": "bridge", "bridge": "`+framework.NodeSecondaryBridge+`",
  "ipam": {"type": "ipkeeper", "range": "10.212.0.0/24", "range_start": "10.212.0.100", "range_end": "10.212.0.120"}
}`)
	vm := lab.VM(ctx, t, ns, "vm1", "", "blue")
	vmi, before := lab.WaitGuest(ctx, t, vm)
	m := &migrating{ns: ns, vm: vm, source: vmi.Status.NodeName, before: before}
	m.target = lab.nodes[0].Name
	if m.source == m.target {
		m.target = lab.nodes[1].Name
	}
	m.claim = lab.Claim(ctx, t, ns, "vm1.blue")
	m.held = lab.ReservationsOf(ctx, t, m.claim)
	t.Logf("before: VMI on %s; claim vm1.blue %v (%s); the guest says: %s", m.source, m.claim.Status.IPs, describe(m.held), before.line)
	if len(m.claim.Status.IPs) != 1 || before.inet != m.claim.Status.IPs[0] || len(m.held) != 1 {
		t.Fatalf("before the migration the guest holds %s; its claim records %v and holds %s", before.inet, m.claim.Status.IPs, describe(m.held))
	}
	m.addr, _, _ = strings.Cut(before.inet, "/")

	steps := []struct {
		name string
		run  func(context.Context, *testing.T, *migrating)
	}{
		{"LiveMigration", liveMigration},
		{"IpkeeperRestartedDuringMigration", migrationWhileIpkeeperRestarts},
		{"FailedMigration", failedMigration},
		{"AddressTakenAndPoolExhausted", addressTakenAndPoolExhausted},
		{"VMDeletedAddressCoolsDown", vmDeletedAddressCoolsDown},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(ctx, t, m) }) {
			return
		}
	}
}

// migrating is the VM the migration steps move, one after the other.
type migrating struct {
	ns, source, target, addr string
	vm                       *kubevirtv1.VirtualMachine
	claim                    *ipamclaimsv1alpha1.IPAMClaim
	held                     []ipkv1.IPReservation
	before                   guestReport
}

// swap makes the node the VM runs on now its source.
func (m *migrating) swap() { m.source, m.target = m.target, m.source }

// liveMigration: the VM live-migrates to the other node with KubeVirt's own
// migration (virt-controller's target launcher, virt-handler's migration
// proxies, libvirt's and QEMU's migration). The guest on the target holds
// the same address and MAC, a ping and a TCP stream from a pod on the L2
// network keep going (their loss and the longest gap are reported), and
// the source launcher's DEL releases nothing of the claim.
func liveMigration(ctx context.Context, t *testing.T, m *migrating) {
	// The watcher runs on the migration's target node: the guest leaves
	// its node for the watcher's, so its frames after the switch cross
	// the node's bridge, before the switch the L2 network between nodes.
	watcher := lab.Watcher(ctx, t, m.ns, "watcher", m.target, m.addr, "watch")
	lab.WaitStream(ctx, t, watcher, 5)

	vmi := lab.VMI(ctx, t, m.vm)
	mig := lab.Migrate(ctx, t, vmi, m.target)
	if mig.Status.Phase != kubevirtv1.MigrationSucceeded {
		t.Fatalf("migration %s ended %s: %s", mig.Name, mig.Status.Phase, lab.describeMigration(ctx, mig))
	}
	vmi, after := lab.WaitGuestOn(ctx, t, m.vm, m.target)
	streamed := lab.WaitStream(ctx, t, watcher, lab.StreamCount(ctx, t, watcher)+20)
	loss := lab.StopWatcher(ctx, t, watcher)
	t.Logf("after a live migration to %s: the guest says: %s", vmi.Status.NodeName, after.line)
	t.Logf("during the migration: %s; the guest's TCP stream kept its one connection (%d lines, none missing)", loss, streamed)
	if after.inet != m.before.inet || !strings.EqualFold(after.mac, m.before.mac) {
		t.Fatalf("after the migration the guest on %s holds %s with MAC %s; before, on %s, %s with MAC %s",
			vmi.Status.NodeName, after.inet, after.mac, m.source, m.before.inet, m.before.mac)
	}
	if loss.received == 0 || loss.longestGap > 30*time.Second {
		t.Fatalf("the ping from %s to the guest did not keep going: %s", m.target, loss)
	}
	// The source launcher's DEL (the kubelet's, when it ends) releases
	// nothing of the claim.
	lab.WaitLaunchersGone(ctx, t, vmi, m.source)
	m.checkClaimKept(ctx, t, "after the source launcher's DEL")
	m.swap()
}

// migrationWhileIpkeeperRestarts: ipkeeper-controller's pods and the
// target node's agent pod are deleted as the migration starts; their
// Deployment and DaemonSet bring them back, the target launcher's ADD is
// served by the new agent, the migration completes and the address is kept.
func migrationWhileIpkeeperRestarts(ctx context.Context, t *testing.T, m *migrating) {
	vmi := lab.VMI(ctx, t, m.vm)
	mig := lab.StartMigration(ctx, t, vmi, m.target)
	deleted := lab.DeleteIpkeeperPods(ctx, t, m.target)
	t.Logf("deleted %s as migration %s started", strings.Join(deleted, ", "), mig.Name)
	mig = lab.WaitMigration(ctx, t, mig)
	if mig.Status.Phase != kubevirtv1.MigrationSucceeded {
		t.Fatalf("migration %s ended %s: %s", mig.Name, mig.Status.Phase, lab.describeMigration(ctx, mig))
	}
	vmi, after := lab.WaitGuestOn(ctx, t, m.vm, m.target)
	t.Logf("after a live migration to %s while ipkeeper restarted: the guest says: %s", vmi.Status.NodeName, after.line)
	if after.inet != m.before.inet || !strings.EqualFold(after.mac, m.before.mac) {
		t.Fatalf("the guest on %s holds %s with MAC %s, before %s with MAC %s", vmi.Status.NodeName, after.inet, after.mac, m.before.inet, m.before.mac)
	}
	lab.WaitLaunchersGone(ctx, t, vmi, m.source)
	m.checkClaimKept(ctx, t, "after the migration while ipkeeper restarted")
	m.swap()
}

// failedMigration: a migration slowed by a MigrationPolicy's bandwidth
// whose target launcher (its virt-launcher process) is killed once the
// migration runs fails; the VM keeps running on its node with its
// address, the target launcher's DEL releases nothing, nothing leaks.
func failedMigration(ctx context.Context, t *testing.T, m *migrating) {
	policy := "slow-" + m.ns
	lab.Apply(ctx, t, `apiVersion: migrations.kubevirt.io/v1alpha1
kind: MigrationPolicy
metadata:
  name: `+policy+`
spec:
  bandwidthPerMigration: 1Mi
  selectors:
    namespaceSelector: {kubernetes.io/metadata.name: `+m.ns+`}
`)
	defer func() { _, _ = lab.cp.Kubectl(context.Background(), nil, "delete", "migrationpolicy", policy) }()
	vmi := lab.VMI(ctx, t, m.vm)
	mig := lab.StartMigration(ctx, t, vmi, m.target)
	pod := lab.WaitMigrationRunning(ctx, t, mig)
	lab.Node(t, m.target).Kill(ctx, t, containerID(t, pod, "compute"))
	t.Logf("killed virt-launcher of the target launcher %s on %s while migration %s ran", pod.Name, m.target, mig.Name)
	mig = lab.WaitMigration(ctx, t, mig)
	if mig.Status.Phase != kubevirtv1.MigrationFailed {
		t.Fatalf("migration %s ended %s after its target launcher was killed: %s", mig.Name, mig.Status.Phase, lab.describeMigration(ctx, mig))
	}
	lab.WaitLaunchersGone(ctx, t, vmi, m.target)
	vmi, after := lab.WaitGuestOn(ctx, t, m.vm, m.source)
	t.Logf("after the failed migration the VM runs on %s; the guest says: %s", vmi.Status.NodeName, after.line)
	if after.inet != m.before.inet || !strings.EqualFold(after.mac, m.before.mac) {
		t.Fatalf("the guest on %s holds %s with MAC %s, before %s with MAC %s", vmi.Status.NodeName, after.inet, after.mac, m.before.inet, m.before.mac)
	}
	m.checkClaimKept(ctx, t, "after the failed migration")
	lab.CheckNoPodReservations(ctx, t, m.held[0].Spec.Pool)
}

// addressTakenAndPoolExhausted: a VM asking for the running VM's address
// and a VM on the network's exhausted pool each learn why from their
// claim's condition and an Event on the VM; the running VM keeps its
// address, and its guest too.
func addressTakenAndPoolExhausted(ctx context.Context, t *testing.T, m *migrating) {
	asks := lab.VMAsking(ctx, t, m.ns, "asks", m.source, "blue", m.addr)
	other := lab.VM(ctx, t, m.ns, "other", m.source, "blue")
	lab.WaitVMEvent(ctx, t, asks, "RequestedAddressesNotHonoured", "Taken")
	lab.WaitVMEvent(ctx, t, other, "IPsNotAllocated", "SubnetExhausted")
	for name, reason := range map[string]string{"asks.blue": "IPAddressConflict", "other.blue": "SubnetExhausted"} {
		c := lab.Claim(ctx, t, m.ns, name)
		if cond := meta.FindStatusCondition(c.Status.Conditions, "IPsAllocated"); cond == nil || cond.Reason != reason || len(c.Status.IPs) != 0 {
			t.Errorf("claim %s: IPsAllocated %+v, status.ips %v; want %s and no address", name, cond, c.Status.IPs, reason)
		}
	}
	vmi, report := lab.WaitGuestOn(ctx, t, m.vm, m.source)
	if report.inet != m.before.inet {
		t.Fatalf("the running VM's guest on %s holds %s, before %s", vmi.Status.NodeName, report.inet, m.before.inet)
	}
	m.checkClaimKept(ctx, t, "while two VMs wanted its address")
	for _, vm := range []*kubevirtv1.VirtualMachine{asks, other} {
		lab.DeleteVM(ctx, t, vm)
	}
}

// vmDeletedAddressCoolsDown: the VM deleted, its claim goes, its
// reservation is released into the pool's cooldown and then freed.
func vmDeletedAddressCoolsDown(ctx context.Context, t *testing.T, m *migrating) {
	deleted := time.Now()
	lab.DeleteVM(ctx, t, m.vm)
	name := m.held[0].Name
	var r ipkv1.IPReservation
	var cooled *metav1.Time
	// The claim goes some 30 s after the VM here (seen on two cores), then
	// the cooldown, then the garbage collector.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := lab.cp.Client.Get(ctx, client.ObjectKey{Name: name}, &r); err != nil {
			return apierrors.IsNotFound(err), nil
		}
		if r.Spec.ReuseAfter != nil {
			cooled = r.Spec.ReuseAfter
		}
		return false, nil
	}); err != nil {
		var claim ipamclaimsv1alpha1.IPAMClaim
		claimErr := lab.cp.Client.Get(ctx, client.ObjectKeyFromObject(m.claim), &claim)
		t.Fatalf("reservation %s of the deleted VM still there after 3m: %+v; its claim: %v %+v", name, r.Spec, claimErr, claim.ObjectMeta)
	}
	if err := lab.cp.Client.Get(ctx, client.ObjectKeyFromObject(m.claim), &ipamclaimsv1alpha1.IPAMClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("claim %s of the deleted VM: %v, want it gone", m.claim.Name, err)
	}
	if cooled == nil {
		t.Fatalf("reservation %s was deleted without cooling down (no reuseAfter seen)", name)
	}
	t.Logf("the deleted VM's reservation %s cooled down until %s, then went, %s after the VM's deletion", name, cooled.UTC().Format(time.RFC3339), time.Since(deleted).Round(time.Second))
}

// checkClaimKept: the claim records the address it had and holds the one
// reservation it held, not released.
func (m *migrating) checkClaimKept(ctx context.Context, t *testing.T, when string) {
	t.Helper()
	claim := lab.Claim(ctx, t, m.ns, m.claim.Name)
	now := lab.ReservationsOf(ctx, t, claim)
	if claim.UID != m.claim.UID || len(claim.Status.IPs) != 1 || claim.Status.IPs[0] != m.before.inet || len(now) != 1 || now[0].Name != m.held[0].Name || now[0].Spec.Released() {
		t.Fatalf("%s the claim records %v and holds %s; before %s and %s", when, claim.Status.IPs, describe(now), m.before.inet, describe(m.held))
	}
}

// Claim reads an IPAMClaim.
func (l *Lab) Claim(ctx context.Context, t *testing.T, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := l.cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &claim); err != nil {
		t.Fatalf("reading IPAMClaim %s/%s: %v", ns, name, err)
	}
	return &claim
}

// Migrate creates a VirtualMachineInstanceMigration of vmi to node (its
// addedNodeSelector) and waits until it ends, succeeded or failed.
func (l *Lab) Migrate(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, node string) *kubevirtv1.VirtualMachineInstanceMigration {
	t.Helper()
	mig := l.StartMigration(ctx, t, vmi, node)
	return l.WaitMigration(ctx, t, mig)
}

// StartMigration creates the migration object and returns at once.
func (l *Lab) StartMigration(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, node string) *kubevirtv1.VirtualMachineInstanceMigration {
	t.Helper()
	mig := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, GenerateName: vmi.Name + "-to-" + node + "-"},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name,
			AddedNodeSelector: map[string]string{corev1.LabelHostname: node}},
	}
	if err := l.cp.Client.Create(ctx, mig); err != nil {
		t.Fatalf("creating a migration of VMI %s: %v", vmi.Name, err)
	}
	return mig
}

// WaitMigration waits until the migration succeeds or fails.
func (l *Lab) WaitMigration(ctx context.Context, t *testing.T, mig *kubevirtv1.VirtualMachineInstanceMigration) *kubevirtv1.VirtualMachineInstanceMigration {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, labMigrationTimeout, true, func(ctx context.Context) (bool, error) {
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(mig), mig); err != nil {
			return false, nil
		}
		return mig.Status.Phase == kubevirtv1.MigrationSucceeded || mig.Status.Phase == kubevirtv1.MigrationFailed, nil
	}); err != nil {
		t.Fatalf("migration %s not ended after %s (phase %q): %s", mig.Name, labMigrationTimeout, mig.Status.Phase, l.describeMigration(ctx, mig))
	}
	t.Logf("migration %s: %s after %s", mig.Name, mig.Status.Phase, time.Since(start).Round(100*time.Millisecond))
	return mig
}

// describeMigration is what a failed migration's message shows: the
// VMI's migration state, the launchers and the claims of its namespace.
func (l *Lab) describeMigration(ctx context.Context, mig *kubevirtv1.VirtualMachineInstanceMigration) string {
	var vmi kubevirtv1.VirtualMachineInstance
	state := "no VMI"
	if err := l.cp.Client.Get(ctx, client.ObjectKey{Namespace: mig.Namespace, Name: mig.Spec.VMIName}, &vmi); err == nil {
		state = fmt.Sprintf("VMI on %s, conditions %v, migration state %+v", vmi.Status.NodeName, vmi.Status.Conditions, vmi.Status.MigrationState)
	}
	out, _ := l.cp.Kubectl(ctx, nil, "get", "vmim,vmi,pods,ipamclaims,ipreservations,events", "-n", mig.Namespace, "-o", "wide")
	return state + "\n" + string(out)
}

// launcherOn names the VMI's running launcher pod on node, or "".
func (l *Lab) launcherOn(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, node string) string {
	var pods corev1.PodList
	if err := l.cp.Client.List(ctx, &pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return ""
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Name
		}
	}
	return ""
}

// WaitLaunchersGone waits until no launcher of the VMI runs on node any
// more (its pod ended, its DEL done).
func (l *Lab) WaitLaunchersGone(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, node string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, labPodTimeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := l.cp.Client.List(ctx, &pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "get", "pods", "-n", vmi.Namespace, "-o", "wide")
		t.Fatalf("VMI %s: a launcher still runs on %s after %s:\n%s", vmi.Name, node, labPodTimeout, out)
	}
}

// Watcher runs a pod on node attached to the networks that pings addr
// every pingInterval and reads the guest's TCP stream
// (framework.GuestStreamPort) on one connection, into files StreamCount
// and StopWatcher read. Its nc reads a pipe nobody writes: busybox's nc
// hangs up when its input ends.
func (l *Lab) Watcher(ctx context.Context, t *testing.T, ns, name, node, addr string, networks ...string) *corev1.Pod {
	t.Helper()
	script := fmt.Sprintf(`mkdir -p /tmp
ping -i %.1f %s >/tmp/ping 2>&1 & echo $! >/tmp/ping.pid
mkfifo /tmp/in && (exec sleep 3600) >/tmp/in &
until nc %s %d </tmp/in >/tmp/stream 2>/dev/null; do echo "refused $(date)" >>/tmp/stream.log; sleep 1; done
echo "closed $(date)" >>/tmp/stream.log
exec sleep 3600`, pingInterval.Seconds(), addr, addr, framework.GuestStreamPort)
	return l.PodRunning(ctx, t, ns, name, node, []string{"sh", "-c", script}, networks...)
}

// StreamCount is the last counter value the watcher received, or -1.
func (l *Lab) StreamCount(ctx context.Context, t *testing.T, watcher *corev1.Pod) int {
	t.Helper()
	out, err := l.ExecIn(ctx, watcher, "sh", "-c", "tail -n 2 /tmp/stream 2>/dev/null | head -n 1")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return -1
	}
	return n
}

// WaitStream waits until the watcher has received the counter up to at
// least want on its one connection (the stream log records a closed
// connection), and returns the lines received.
func (l *Lab) WaitStream(ctx context.Context, t *testing.T, watcher *corev1.Pod, want int) int {
	t.Helper()
	got := -1
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got = l.StreamCount(ctx, t, watcher)
		return got >= want, nil
	}); err != nil {
		log, _ := l.ExecIn(ctx, watcher, "cat", "/tmp/stream.log")
		t.Fatalf("the guest's TCP stream to %s reached %d, not %d: %s", watcher.Name, got, want, log)
	}
	if log, err := l.ExecIn(ctx, watcher, "cat", "/tmp/stream.log"); err == nil && strings.Contains(string(log), "closed") {
		t.Fatalf("the guest's TCP stream to %s was closed: %s", watcher.Name, log)
	}
	out, err := l.ExecIn(ctx, watcher, "sh", "-c", "wc -l </tmp/stream")
	if err != nil {
		t.Fatalf("reading the stream in %s: %v", watcher.Name, err)
	}
	lines, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if lines < got {
		t.Fatalf("the guest's TCP stream to %s skipped lines: %d lines up to counter %d", watcher.Name, lines, got)
	}
	return lines
}

// pingLoss is what the watcher's ping saw.
type pingLoss struct {
	sent, received int
	longestGap     time.Duration
}

func (p pingLoss) String() string {
	lost := p.sent - p.received
	pct := 0.0
	if p.sent > 0 {
		pct = 100 * float64(lost) / float64(p.sent)
	}
	return fmt.Sprintf("ping every %s: %d sent, %d lost (%.1f%%), longest gap %s", pingInterval, p.sent, lost, pct, p.longestGap)
}

var pingSeq = regexp.MustCompile(`seq=(\d+)`)

// StopWatcher interrupts the watcher's ping and reads its summary: the
// replies' sequence numbers give the longest gap without a reply.
func (l *Lab) StopWatcher(ctx context.Context, t *testing.T, watcher *corev1.Pod) pingLoss {
	t.Helper()
	if out, err := l.ExecIn(ctx, watcher, "sh", "-c", "kill -INT $(cat /tmp/ping.pid)"); err != nil {
		t.Fatalf("stopping the ping in %s: %v %s", watcher.Name, err, out)
	}
	var p pingLoss
	var out []byte
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = l.ExecIn(ctx, watcher, "cat", "/tmp/ping")
		return err == nil && strings.Contains(string(out), "packets transmitted"), nil
	}); err != nil {
		t.Fatalf("the ping in %s gave no summary: %s", watcher.Name, out)
	}
	prev := -1
	for _, line := range strings.Split(string(out), "\n") {
		if m := pingSeq.FindStringSubmatch(line); m != nil {
			seq, _ := strconv.Atoi(m[1])
			if prev >= 0 && seq-prev > 1 {
				if gap := time.Duration(seq-prev) * pingInterval; gap > p.longestGap {
					p.longestGap = gap
				}
			}
			prev = seq
			p.received++
		}
		if strings.Contains(line, "packets transmitted") {
			_, _ = fmt.Sscanf(strings.TrimSpace(line), "%d packets transmitted", &p.sent)
		}
	}
	return p
}

// VMI reads the VM's VMI.
func (l *Lab) VMI(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	var vmi kubevirtv1.VirtualMachineInstance
	if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), &vmi); err != nil {
		t.Fatalf("reading the VMI of %s: %v", vm.Name, err)
	}
	return &vmi
}

// Node is the lab's node of that name.
func (l *Lab) Node(t *testing.T, name string) *framework.RealNode {
	t.Helper()
	for _, n := range l.nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in the lab", name)
	return nil
}

// containerID is the containerd ID of the pod's container.
func containerID(t *testing.T, pod *corev1.Pod, container string) string {
	t.Helper()
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == container && c.ContainerID != "" {
			_, id, _ := strings.Cut(c.ContainerID, "://")
			return id
		}
	}
	t.Fatalf("pod %s has no running container %s: %+v", pod.Name, container, pod.Status.ContainerStatuses)
	return ""
}

// Apply applies YAML as a user would (kubectl apply).
func (l *Lab) Apply(ctx context.Context, t *testing.T, yaml string) {
	t.Helper()
	if out, err := l.cp.Kubectl(ctx, []byte(yaml), "apply", "-f", "-"); err != nil {
		t.Fatalf("applying %s: %v\n%s", yaml, err, out)
	}
}

// DeleteIpkeeperPods deletes ipkeeper-controller's pods and the agent pod
// of node, and returns their names.
func (l *Lab) DeleteIpkeeperPods(ctx context.Context, t *testing.T, node string) []string {
	t.Helper()
	var pods corev1.PodList
	if err := l.cp.Client.List(ctx, &pods, client.InNamespace("ipkeeper-system")); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for i := range pods.Items {
		p := &pods.Items[i]
		name := p.Labels["app.kubernetes.io/name"]
		if name != "ipkeeper-controller" && (name != "ipkeeper-agent" || p.Spec.NodeName != node) {
			continue
		}
		if err := l.cp.Client.Delete(ctx, p); err != nil {
			t.Fatalf("deleting %s: %v", p.Name, err)
		}
		deleted = append(deleted, p.Name)
	}
	if len(deleted) < 2 {
		t.Fatalf("deleted %v: want ipkeeper-controller's pods and %s's agent", deleted, node)
	}
	return deleted
}

// WaitMigrationRunning waits until the migration's target launcher runs
// and the source has started sending the VM, and returns that launcher.
func (l *Lab) WaitMigrationRunning(ctx context.Context, t *testing.T, mig *kubevirtv1.VirtualMachineInstanceMigration) *corev1.Pod {
	t.Helper()
	var target *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, labMigrationTimeout, true, func(ctx context.Context) (bool, error) {
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(mig), mig); err != nil || mig.UID == "" {
			return false, nil
		}
		if mig.Status.Phase == kubevirtv1.MigrationSucceeded || mig.Status.Phase == kubevirtv1.MigrationFailed {
			return false, fmt.Errorf("migration %s ended %s before it was seen running", mig.Name, mig.Status.Phase)
		}
		var pods corev1.PodList
		if err := l.cp.Client.List(ctx, &pods, client.InNamespace(mig.Namespace), client.MatchingLabels{kubevirtv1.MigrationJobLabel: string(mig.UID)}); err != nil || len(pods.Items) != 1 {
			return false, nil
		}
		target = &pods.Items[0]
		var vmi kubevirtv1.VirtualMachineInstance
		if err := l.cp.Client.Get(ctx, client.ObjectKey{Namespace: mig.Namespace, Name: mig.Spec.VMIName}, &vmi); err != nil {
			return false, nil
		}
		st := vmi.Status.MigrationState
		return target.Status.Phase == corev1.PodRunning && st != nil && st.MigrationUID == mig.UID && st.StartTimestamp != nil, nil
	}); err != nil {
		t.Fatalf("migration %s not seen running: %v: %s", mig.Name, err, l.describeMigration(ctx, mig))
	}
	return target
}

// CheckNoPodReservations fails if a pod holds an address of the pool: a
// launcher's reservations are its claim's.
func (l *Lab) CheckNoPodReservations(ctx context.Context, t *testing.T, pool string) {
	t.Helper()
	var list ipkv1.IPReservationList
	if err := l.cp.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if r.Spec.Owner.Kind == ipkv1.OwnerPod && r.Spec.Pool == pool {
			t.Errorf("reservation %s is held by pod %s: a launcher's address is its claim's", r.Name, r.Spec.Owner.Name)
		}
	}
}

// VMAsking is VM with its template asking for addr on network
// (network.kubevirt.io/addresses).
func (l *Lab) VMAsking(ctx context.Context, t *testing.T, ns, name, node, network, addr string) *kubevirtv1.VirtualMachine {
	t.Helper()
	return l.vm(ctx, t, ns, name, node, func(vm *kubevirtv1.VirtualMachine) {
		vm.Spec.Template.ObjectMeta.Annotations = map[string]string{"network.kubevirt.io/addresses": fmt.Sprintf(`{%q: [%q]}`, network, addr)}
	}, network)
}

// WaitVMEvent waits for an Event on the VM with reason whose message
// contains want.
func (l *Lab) WaitVMEvent(ctx context.Context, t *testing.T, vm *kubevirtv1.VirtualMachine, reason, want string) {
	t.Helper()
	var seen []string
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if vm.UID == "" {
			if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
				return false, nil
			}
		}
		var events corev1.EventList
		if err := l.cp.Client.List(ctx, &events, client.InNamespace(vm.Namespace)); err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID != vm.UID {
				continue
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && strings.Contains(ev.Message, want) {
				t.Logf("VM %s: %s %s: %s", vm.Name, ev.Type, ev.Reason, ev.Message)
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no %s Event containing %q on VM %s; its Events: %q", reason, want, vm.Name, seen)
	}
}

// DeleteVM deletes the VM and waits until it, its VMI and its launcher
// pods (which carry the template's app label, framework.NewVM) are gone.
func (l *Lab) DeleteVM(ctx context.Context, t testing.TB, vm *kubevirtv1.VirtualMachine) {
	t.Helper()
	if err := l.cp.Client.Delete(ctx, vm); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting VM %s: %v", vm.Name, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, o := range []client.Object{&kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}} {
			if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), o); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		var pods corev1.PodList
		if err := l.cp.Client.List(ctx, &pods, client.InNamespace(vm.Namespace), client.MatchingLabels{"app": vm.Name}); err != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	}); err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "get", "vm,vmi,pods", "-n", vm.Namespace, "-o", "wide")
		t.Fatalf("VM %s not gone after 2m:\n%s", vm.Name, out)
	}
}
