// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestStaticIPThroughIPsCapability requests an address the way Multus does
// for a network selection element with "ips": the plugin declares the "ips"
// capability and the runtime passes runtimeConfig.ips, which bridge hands
// on to ipkeeper. A second pod asking for the same address, and a pod
// asking for the gateway, are refused with errors that say why.
func TestStaticIPThroughIPsCapability(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const network = "e2e-static"
	bridge := "ipkb" + UniqueSuffix(8)
	DeleteHostLinkOnCleanup(t, bridge)
	list := Conflist(t, network, map[string]any{
		"type":         "bridge",
		"bridge":       bridge,
		"isGateway":    true,
		"capabilities": map[string]bool{"ips": true},
		"ipam":         n.IPAM(map[string]any{"range": "10.77.5.0/24", "gateway": "10.77.5.1"}),
	})
	ns := c.NewNamespace(t, "e2e-static")
	c.Define(t, ns, list)
	sfx := UniqueSuffix(6)

	want := netip.MustParsePrefix("10.77.5.50/24")
	a1 := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-1"), "eth0", c.CreatePod(t, ns, "pod-1", n.Name, ""))
	a1.RT.CapabilityArgs = map[string]any{"ips": []string{want.String()}}
	a1.MustAdd(t)
	if got := a1.IP(t); got != want {
		t.Fatalf("static request for %s returned %s", want, got)
	}
	c.ExpectReservations(t, network, a1)
	expectAddr(ctx, t, a1.NetNS, "eth0", want)

	for _, tc := range []struct {
		pod, ip string
		code    uint
		msg     string
	}{
		{"pod-2", "10.77.5.50/24", types.ErrInternal, "already reserved by Pod " + ns + "/pod-1"},
		{"pod-3", "10.77.5.1", types.ErrInvalidNetworkConfig, "is the gateway"},
	} {
		a := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-"+tc.pod[4:]), "eth0", c.CreatePod(t, ns, tc.pod, n.Name, ""))
		a.RT.CapabilityArgs = map[string]any{"ips": []string{tc.ip}}
		err := a.Add(ctx)
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != tc.code || !strings.Contains(ce.Msg, tc.msg) {
			t.Errorf("%s asking for %s: want CNI error %d containing %q, got %v", tc.pod, tc.ip, tc.code, tc.msg, err)
		} else {
			t.Logf("%s asking for %s refused: %v", tc.pod, tc.ip, ce)
		}
	}
	c.ExpectReservations(t, network, a1)
}
