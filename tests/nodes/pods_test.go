// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	ipkv1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// testPodOnIpkeeperNetwork: a pod on each real node with a secondary
// network whose IPAM is ipkeeper, attached by the runtime's own CNI ADD
// through Multus and the bridge plugin. What the pod's interface carries is
// its reservation's address; the two pods reach each other across nodes on
// it; a sandbox the kubelet recreates (its pause process killed) ends with
// one address held and none left over; deleting the pod releases it through
// the runtime's own DEL.
func testPodOnIpkeeperNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := lab.Namespace(ctx, t, "pods")
	blue := `{
  "cniVersion": "1.0.0", "name": "lab-blue", "type": "bridge", "bridge": "` + framework.NodeSecondaryBridge + `",
  "ipam": {"type": "ipkeeper", "range": "10.210.0.0/24"}
}`
	lab.NAD(ctx, t, ns, "blue", blue)
	pa := lab.Pod(ctx, t, ns, "pa", lab.nodes[0].Name, "blue")
	pb := lab.Pod(ctx, t, ns, "pb", lab.nodes[1].Name, "blue")

	addrA := lab.InterfaceAddress(ctx, t, pa, "net1")
	addrB := lab.InterfaceAddress(ctx, t, pb, "net1")
	resA := lab.ReservationsOf(ctx, t, pa)
	if len(resA) != 1 || resA[0].Spec.IP != addrA || resA[0].Spec.Node != lab.nodes[0].Name {
		t.Fatalf("pod %s shows %s on net1; its reservations: %s", pa.Name, addrA, describe(resA))
	}
	t.Logf("%s on %s: net1 %s, reserved as %s", pa.Name, pa.Spec.NodeName, addrA, resA[0].Name)
	t.Logf("%s on %s: net1 %s", pb.Name, pb.Spec.NodeName, addrB)
	if out, err := lab.ExecIn(ctx, pb, "ping", "-c", "3", "-W", "2", addrA); err != nil {
		t.Fatalf("%s cannot reach %s on the secondary network across nodes: %v\n%s", pb.Name, addrA, err, out)
	}
	// CHECK of the running attachment (see framework.CheckAttachment: no
	// runtime here sends it), then of one whose address was taken off the
	// interface, which must fail.
	if err := lab.nodes[0].CheckAttachment(ctx, t, pa, blue, "net1"); err != nil {
		t.Fatalf("CHECK of a running attachment: %v", err)
	}
	if out, err := lab.nodes[1].InPodNetwork(ctx, t, pb, "ip", "addr", "del", addrB+"/24", "dev", "net1"); err != nil {
		t.Fatalf("removing %s from %s: %v\n%s", addrB, pb.Name, err, out)
	}
	if err := lab.nodes[1].CheckAttachment(ctx, t, pb, blue, "net1"); err == nil {
		t.Fatalf("CHECK passed for %s, whose net1 no longer has its address %s", pb.Name, addrB)
	} else {
		t.Logf("CHECK of an attachment that lost its address fails: %v", err)
	}

	// The kubelet recreates a dead sandbox: DEL of the old one, ADD of the
	// new one. One address is held at the end, and it is on the pod.
	oldSandbox := lab.nodes[0].SandboxOf(ctx, t, pa)
	lab.nodes[0].Kill(ctx, t, oldSandbox)
	var res []ipkv1.IPReservation
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if s := lab.nodes[0].SandboxOf(ctx, t, pa); s == "" || s == oldSandbox {
			return false, nil
		}
		res = lab.ReservationsOf(ctx, t, pa)
		return len(res) == 1 && res[0].Spec.ContainerID != oldSandbox && lab.PodReady(ctx, t, pa), nil
	}); err != nil {
		t.Fatalf("after its sandbox %s was killed, pod %s holds %s", oldSandbox, pa.Name, describe(res))
	}
	after := lab.InterfaceAddress(ctx, t, pa, "net1")
	if after != res[0].Spec.IP {
		t.Fatalf("the recreated sandbox of %s shows %s on net1, its reservation says %s", pa.Name, after, res[0].Spec.IP)
	}
	t.Logf("sandbox recreated: net1 %s, reservation %s held by sandbox %.12s", after, res[0].Name, res[0].Spec.ContainerID)

	// Deletion: the kubelet's teardown is the runtime's own DEL.
	if err := lab.cp.Client.Delete(ctx, pa); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		res = lab.ReservationsOf(ctx, t, pa)
		held := 0
		for _, r := range res {
			if r.Spec.ReuseAfter == nil {
				held++
			}
		}
		return held == 0, nil
	}); err != nil {
		t.Fatalf("deleted pod %s still holds %s", pa.Name, describe(res))
	}
}

func describe(res []ipkv1.IPReservation) string {
	if len(res) == 0 {
		return "no reservation"
	}
	var b strings.Builder
	for _, r := range res {
		fmt.Fprintf(&b, "[%s ip=%s node=%s sandbox=%.12s reuseAfter=%v] ", r.Name, r.Spec.IP, r.Spec.Node, r.Spec.ContainerID, r.Spec.ReuseAfter)
	}
	return b.String()
}
