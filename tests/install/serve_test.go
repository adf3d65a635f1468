// SPDX-License-Identifier: Apache-2.0

package install

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// serveAnAdd runs the installation in releaseNamespace as processes (the
// installed Deployment's and DaemonSet's command lines) and sends an ADD
// and a DEL for a pod on a NAD of an inline network of cidr: the
// controller makes the network's pool, the agent reserves an address in it
// and releases it. Each call needs its own cidr: a pool made by an earlier
// call may outlive it for a moment, and the controller refuses an inline
// network overlapping another's pool.
func serveAnAdd(t *testing.T, bins *framework.Binaries, node, cidr string) {
	serveAnAddIn(t, bins, releaseNamespace, node, cidr)
}

// serveAnAddIn is serveAnAdd for an installation in namespace installedIn.
func serveAnAddIn(t *testing.T, bins *framework.Binaries, installedIn, node, cidr string) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "install")
	network := ns
	pool := naming.InlinePool(network)
	// Registered before the processes and the NAD, so that it runs after
	// both are gone (cleanups run last first): a running controller would
	// make the pool again from the NAD.
	t.Cleanup(func() {
		_ = cp.Client.Delete(context.Background(), &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}})
	})
	in := cp.RunInstalled(t, framework.InstalledOptions{Namespace: installedIn, Binaries: bins, Node: node})
	// The API server reaches the installed webhook with the CA it was given.
	if err := cp.WaitWebhookCalled(ctx, ns); err != nil {
		t.Fatalf("the installed webhook: %v", err)
	}
	nad := cp.CreateNAD(t, ns, "net", json.RawMessage(fmt.Sprintf(
		`{"cniVersion":"1.0.0","name":%q,"type":"bridge","ipam":{"type":"ipkeeper","range":%q}}`, network, cidr)))
	if _, err := cp.WaitPool(ctx, pool); err != nil {
		t.Fatalf("the installed controller did not make the inline network's pool: %v", err)
	}
	pod := cp.CreatePods(t, ns, node, "pod", 1)[0]
	res, err := in.Add(ctx, pod, "net1", nad)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IPs) != 1 {
		t.Fatalf("ADD result %+v: want one address", res)
	}
	ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	if !netip.MustParsePrefix(cidr).Contains(ip.Unmap()) {
		t.Errorf("ADD gave %s, outside the network's range %s", ip, cidr)
	}
	resv, err := framework.Reservations(ctx, cp.Client, network)
	if err != nil {
		t.Fatal(err)
	}
	if len(resv) != 1 || resv[0].Spec.IP != ip.Unmap().String() || resv[0].Spec.Node != node {
		t.Fatalf("reservations of %s after the ADD: %+v; want one of %s on %s", network, resv, ip, node)
	}
	if got := resv[0].Labels[naming.NodeLabel]; got != naming.NodeLabelValue(node) && got != naming.SharedNodeLabelValue {
		t.Errorf("the agent's reservation is labelled %s=%q: neither its node nor shared", naming.NodeLabel, got)
	}
	if err := in.Del(ctx, pod, "net1", nad); err != nil {
		t.Fatal(err)
	}
	if resv, err := framework.Reservations(ctx, cp.Client, network); err != nil || len(resv) != 0 {
		t.Errorf("reservations of %s after the DEL: %d (%v); want none", network, len(resv), err)
	}
}
