// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestClaimBackedCheck: CHECK verifies a claim-backed attachment like a
// pod's: it passes while the claim records an address reserved for it, on
// the node where the launcher runs, and fails naming the address once the
// reservation is gone.
func TestClaimBackedCheck(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "claimcheck")
	const network = "claim-check-net"
	conf := persistentConf(network, map[string]any{"range": "10.74.0.0/24"})
	ctrl := claimNetwork(t, ns, conf)
	a := cp.StartAgent(t, "node-cc1")
	claim := createClaim(t, ns, "vm1.blue", network)
	pod := createLaunchers(t, ns, a.Node, "virt-launcher-vm1", claim.Name, 1)[0]
	res, err := a.Add(ctx, pod, launcherIf, conf)
	if err != nil {
		t.Fatal(err)
	}
	ip := resultIPs(t, res)[0]
	check := cniproto.Request{Command: cniproto.CmdCheck, ContainerID: framework.SandboxID(pod), Netns: "/x", IfName: launcherIf, Args: framework.PodArgs(pod), Config: conf}
	if _, err := a.Client.Do(ctx, check); err != nil {
		t.Fatalf("CHECK of a live claim-backed attachment: %v", err)
	}

	// Without the controller, which would reserve the recorded address again.
	ctrl.Stop()
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name = naming.Reservation(network, ip)
	if err := cp.Client.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 10*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		_, err := a.Client.Do(ctx, check)
		return err != nil, nil
	}); err != nil {
		t.Fatalf("CHECK kept passing after the claim's reservation was deleted: %v", err)
	}
	_, err = a.Client.Do(ctx, check)
	mustContain(t, err, claim.Name, ip.String(), "no reservation")
}
