// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestImportWhereaboutsKeepsAddresses moves two networks from whereabouts
// to ipkeeper in place. The real whereabouts v0.9.4 (hack/tools.sh
// whereabouts), exec'd by the real Multus and bridge plugins, allocates for
// two pods and for a VM's launcher pod; `kubectl ipkeeper import
// whereabouts` imports its allocations; the NADs' ipam.type is switched
// to ipkeeper; then one pod's sandbox is restarted (DEL, then ADD through
// ipkeeper) and the VM is stopped and started (a new launcher pod, ADD
// through ipkeeper with its claim). Every address stays what whereabouts
// gave, and no address is reserved twice. The VM runs through the real
// virt-controller; the kubelet and virt-handler are simulated (Cluster,
// framework.KubeVirt).
func TestImportWhereaboutsKeepsAddresses(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	wbDir := os.Getenv("IPKEEPER_WHEREABOUTS_DIR")
	wbBin := filepath.Join(wbDir, "whereabouts")
	if _, err := os.Stat(wbBin); wbDir == "" || err != nil {
		t.Fatalf("whereabouts is not built (IPKEEPER_WHEREABOUTS_DIR=%q): run `bash hack/tools.sh` (make tools does) and export what `hack/tools.sh --env` prints", wbDir)
	}
	if err := os.Symlink(wbBin, filepath.Join(n.BinDir, "whereabouts")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(c.CP.Config, envtest.CRDInstallOptions{
		Paths: []string{repoFile(t, "tests/crds/whereabouts")}, ErrorIfPathMissing: true, MaxTime: time.Minute, PollInterval: 100 * time.Millisecond,
	}); err != nil {
		t.Fatalf("installing the whereabouts CRDs: %v", err)
	}
	// Whereabouts reads its datastore settings from a flat file its
	// DaemonSet writes on every node (/etc/cni/net.d/whereabouts.d).
	flat := filepath.Join(t.TempDir(), "whereabouts.conf")
	if err := os.WriteFile(flat, []byte(`{"datastore":"kubernetes","kubernetes":{"kubeconfig":"`+c.CP.KubeconfigPath+`"}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	ns := c.NewNamespace(t, "e2e-wbimport")
	c.DumpOnFailure(t, ns)
	plainNet, vmNet := ns+"-plain", ns+"-vm"
	wbIPAM := func(rng string) map[string]any {
		return map[string]any{"range": rng, "configuration_path": flat, "log_level": "debug",
			"kubernetes": map[string]any{"kubeconfig": c.CP.KubeconfigPath}}
	}
	c.BridgeNAD(t, ns, "plain", plainNet, false, wbIPAM("10.79.1.0/24"))
	c.BridgeNAD(t, ns, "vmnet", vmNet, true, wbIPAM("10.79.2.0/24"))
	// BridgeNAD writes ipkeeper's type; these networks start on whereabouts.
	setIPAMType(t, c, ns, "plain", "whereabouts")
	setIPAMType(t, c, ns, "vmnet", "whereabouts")

	p1 := c.MustRun(t, c.PlainPod(t, ns, "p1", n.Name, "plain"))
	p2 := c.MustRun(t, c.PlainPod(t, ns, "p2", n.Name, "plain"))
	vm := c.CreateVM(t, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "vmnet"})
	claim := c.WaitClaim(t, ns, naming.Claim("vm1", "blue"))
	_, launcher := c.StartVM(t, vm, n.Name)
	vmIf := kubevirt.PodInterfaceName("blue")
	before := map[string]netip.Prefix{"p1": p1.MustAddr(t, "net1"), "p2": p2.MustAddr(t, "net1"), "vm1": launcher.MustAddr(t, vmIf)}
	t.Logf("whereabouts v0.9.4 gave p1 %s, p2 %s, vm1 %s", before["p1"], before["p2"], before["vm1"])
	if got := c.Reservations(t, plainNet); len(got) != 0 {
		t.Fatalf("ipkeeper reserved on a whereabouts network: %s", describe(got))
	}

	importCLI := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := cli.Main(ctx, append(args, "--kubeconfig", c.CP.KubeconfigPath), cli.Streams{Out: &out, Err: &errOut})
		t.Logf("$ kubectl ipkeeper %s\n%s%s(exit %d)", strings.Join(args, " "), out.String(), errOut.String(), code)
		return out.String(), errOut.String(), code
	}
	if _, errOut, code := importCLI("import", "whereabouts", "--dry-run"); code != cli.ExitOK || !strings.Contains(errOut, "3 reservations to create") {
		t.Fatalf("dry run: exit %d, %q; want 3 to create", code, errOut)
	}
	if _, errOut, code := importCLI("import", "whereabouts"); code != cli.ExitOK || !strings.Contains(errOut, "3 reservations created") {
		t.Fatalf("import: exit %d, %q; want 3 created", code, errOut)
	}
	if _, errOut, code := importCLI("import", "whereabouts"); code != cli.ExitOK || !strings.Contains(errOut, "Nothing to import") {
		t.Fatalf("second import: exit %d, %q; want nothing to import", code, errOut)
	}

	setIPAMType(t, c, ns, "plain", "ipkeeper")
	setIPAMType(t, c, ns, "vmnet", "ipkeeper")

	// A pod's sandbox restarts: DEL, then ADD, which ipkeeper now serves.
	if !c.teardown(ctx, p1) {
		t.Fatalf("DEL of p1's sandbox failed; CNI log:\n%s", cniLogTail(n.CNILog))
	}
	p1 = c.MustRun(t, c.podOf(t, p1.Pod))
	// A new pod on the network gets a new address, not an imported one.
	p3 := c.MustRun(t, c.PlainPod(t, ns, "p3", n.Name, "plain"))
	// The VM restarts: a new launcher pod, ADD through ipkeeper with the claim.
	if err := c.KV.Stop(ctx, vm); err != nil {
		t.Fatal(err)
	}
	c.WaitGone(t, launcher.Pod)
	c.WaitGone(t, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.Name}})
	_, launcher = c.StartVM(t, vm, n.Name)

	after := map[string]netip.Prefix{"p1": p1.MustAddr(t, "net1"), "p2": p2.MustAddr(t, "net1"), "vm1": launcher.MustAddr(t, vmIf)}
	for who, p := range before {
		if after[who] != p {
			t.Errorf("%s: %s after the switch, %s before", who, after[who], p)
		}
	}
	p3Addr := p3.MustAddr(t, "net1")
	for who, p := range after {
		if p.Addr() == p3Addr.Addr() {
			t.Errorf("the new pod p3 got %s's address %s", who, p)
		}
	}
	// No address held twice: one reservation per address, each the
	// holder's (the claim's for the VM).
	held := map[string]string{}
	for _, network := range []string{plainNet, vmNet} {
		for _, r := range c.Reservations(t, network) {
			if prev, ok := held[r.Spec.IP]; ok {
				t.Errorf("%s is reserved twice: %s and %s", r.Spec.IP, prev, r.Spec.Owner.Name)
			}
			held[r.Spec.IP] = r.Spec.Owner.Name
		}
	}
	want := map[string]string{after["p1"].Addr().String(): "p1", after["p2"].Addr().String(): "p2", p3Addr.Addr().String(): "p3", after["vm1"].Addr().String(): claim.Name}
	for ip, owner := range want {
		if held[ip] != owner {
			t.Errorf("%s: reserved by %q, want %q (all: %v)", ip, held[ip], owner, held)
		}
	}
	if len(held) != len(want) {
		t.Errorf("reservations %v, want exactly %v", held, want)
	}
	// The agent says once per network that the keys left from whereabouts
	// do nothing (two ADDs on the plain network since the switch).
	for _, network := range []string{plainNet, vmNet} {
		count := 0
		for _, l := range strings.Split(n.Agent.Tail(5000), "\n") {
			if strings.Contains(l, "whereabouts keys ipkeeper ignores") && strings.Contains(l, `"network":"`+network+`"`) {
				count++
				t.Logf("agent log: %s", l)
				if !strings.Contains(l, "ipam.configuration_path") || !strings.Contains(l, "ipam.kubernetes.kubeconfig") {
					t.Errorf("agent log line does not list the keys: %s", l)
				}
			}
		}
		if count != 1 {
			t.Errorf("network %s: the agent logged its ignored keys %d times, want once", network, count)
		}
	}
	t.Logf("after the switch: p1 %s, p2 %s, vm1 %s (restarted), new pod p3 %s", after["p1"], after["p2"], after["vm1"], p3Addr)
}

// setIPAMType rewrites a NAD's ipam.type, as an operator switching IPAM does.
func setIPAMType(t *testing.T, c *Cluster, ns, name, typ string) {
	t.Helper()
	var nad nadv1.NetworkAttachmentDefinition
	if err := c.CP.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &nad); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		t.Fatal(err)
	}
	conf["ipam"].(map[string]any)["type"] = typ
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	nad.Spec.Config = string(b)
	if err := c.CP.Client.Update(context.Background(), &nad); err != nil {
		t.Fatal(err)
	}
}

func cniLogTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
