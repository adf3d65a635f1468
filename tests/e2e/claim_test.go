// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestClaimBackedAddressSurvivesNamespaceRecreation stops and starts a
// virtual machine with a persistent address on a bridge network: its
// virt-launcher pod's attachment is DELeted and its sandbox netns deleted,
// then a new launcher pod in a new netns gets the same address, and a peer
// pod reaches it there.
//
// KubeVirt is simulated: the test creates the IPAMClaim ipkeeper's claims
// controller would create for the VM's network, and launcher pods carrying
// the networks annotation (with ipam-claim-reference) its pod webhook would
// add. The launcher's interface is KubeVirt's hashed pod interface name,
// passed as CNI_IFNAME as Multus would from the annotation's "interface".
func TestClaimBackedAddressSurvivesNamespaceRecreation(t *testing.T) {
	c := setup(t)
	n := c.Nodes[0]
	ctx := context.Background()
	const (
		network   = "e2e-claim" // the CNI config name: the claim's spec.network
		vmNetwork = "blue"      // the network's name in the VM spec
		nad       = "blue-nad"  // read by the agent for its allowPersistentIPs (no Multus here)
	)
	subnet := netip.MustParsePrefix("10.77.6.0/24")
	gateway := netip.MustParseAddr("10.77.6.1")
	ifname := kubevirt.PodInterfaceName(vmNetwork)
	bridge := "ipkb" + UniqueSuffix(8)
	DeleteHostLinkOnCleanup(t, bridge) // registered before any attachment: runs after their DELs
	// The flag is at the top level of the NAD's conflist only: libcni hands
	// the bridge plugin (and so ipkeeper) just the plugin object, and the
	// agent reads the flag from the NAD the pod's annotation names.
	nadConfig, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": network, "allowPersistentIPs": true,
		"plugins": []map[string]any{{
			"type":      "bridge",
			"bridge":    bridge,
			"isGateway": true,
			"ipam":      n.IPAM(map[string]any{"range": subnet.String(), "gateway": gateway.String()}),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(nadConfig)
	if err != nil {
		t.Fatal(err)
	}

	ns := c.NewNamespace(t, "e2e-claim")
	if err := c.CP.Client.Create(ctx, &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nad},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: string(nadConfig)},
	}); err != nil {
		t.Fatalf("creating NAD %s/%s: %v", ns, nad, err)
	}
	claim := c.createClaim(t, ns, "vm1."+vmNetwork, network, ifname) // cleanup after the attachments' DELs
	networks := launcherNetworks(t, nad, ns, ifname, claim.Name)
	sfx := UniqueSuffix(6)

	peer := n.NewAttachment(t, list, NewNetNS(t, "ipke2e-"+sfx+"-p"), "eth0", c.CreatePod(t, ns, "peer", n.Name, ""))
	peer.MustAdd(t)
	CheckUsableIP(t, peer.String(), peer.IP(t), subnet, gateway)

	// VM started: launcher A attaches with the claim.
	nsA, stopA := newStoppableNetNS(t, "ipke2e-"+sfx+"-a")
	podA := c.CreatePod(t, ns, "virt-launcher-vm1-a", n.Name, networks)
	a := n.NewAttachment(t, list, nsA, ifname, podA)
	a.MustAdd(t)
	ip := a.IP(t)
	CheckUsableIP(t, a.String(), ip, subnet, gateway)
	if ip.Addr() == peer.IP(t).Addr() {
		t.Fatalf("launcher A got the peer's address %s", ip)
	}
	expectAddr(ctx, t, nsA, ifname, ip)
	c.expectClaimStatus(t, claim, ip, podA)
	c.expectClaimReservations(t, network, claim, ip, peer)
	if err := nsA.Ping(ctx, peer.IP(t).Addr()); err != nil {
		t.Error(err)
	}
	if err := peer.NetNS.Ping(ctx, ip.Addr()); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// VM stopped: the runtime DELs the attachment and the sandbox goes, and
	// so does the launcher pod. The claim keeps its reservation.
	if err := a.Del(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stopA(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.CP.Client.Delete(ctx, podA, client.GracePeriodSeconds(0), client.Preconditions{UID: &podA.UID}); err != nil {
		t.Fatal(err)
	}
	c.WaitGone(t, podA)
	c.expectClaimReservations(t, network, claim, ip, peer) // DEL is synchronous: a wrong release would show here
	c.expectClaimStatus(t, claim, ip, podA)
	if t.Failed() {
		t.FailNow()
	}

	// VM started again: a new launcher pod, a new netns, the same claim.
	nsB := NewNetNS(t, "ipke2e-"+sfx+"-b")
	podB := c.CreatePod(t, ns, "virt-launcher-vm1-b", n.Name, networks)
	b := n.NewAttachment(t, list, nsB, ifname, podB)
	b.MustAdd(t)
	if got := b.IP(t); got != ip {
		t.Fatalf("restarted VM's launcher got %s, the claim holds %s", got, ip)
	}
	expectAddr(ctx, t, nsB, ifname, ip)
	c.expectClaimStatus(t, claim, ip, podB)
	if err := nsB.Ping(ctx, peer.IP(t).Addr()); err != nil {
		t.Error(err)
	}
	if err := peer.NetNS.Ping(ctx, ip.Addr()); err != nil {
		t.Error(err)
	}
	c.expectClaimReservations(t, network, claim, ip, peer)
}

// launcherNetworks renders the k8s.v1.cni.cncf.io/networks annotation of a
// virt-launcher pod whose interface ifname uses claim.
func launcherNetworks(t testing.TB, nad, namespace, ifname, claim string) string {
	t.Helper()
	b, err := json.Marshal([]map[string]string{{
		"name": nad, "namespace": namespace, "interface": ifname, "ipam-claim-reference": claim,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// createClaim creates the IPAMClaim of one VM network, as ipkeeper's claims
// controller would. When t ends it releases the claim's reservations and
// deletes the claim, as the controller does when the VM is deleted: no DEL
// ever releases them.
func (c *Cluster) createClaim(t testing.TB, namespace, name, network, ifname string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: ifname},
	}
	if err := c.CP.Client.Create(context.Background(), claim); err != nil {
		t.Fatalf("creating IPAMClaim %s/%s: %v", namespace, name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		rs, err := framework.Reservations(ctx, c.CP.Client, network)
		if err != nil {
			t.Logf("cleanup: %v", err)
		}
		for _, r := range rs {
			if r.Spec.Owner.UID != claim.UID {
				continue
			}
			if err := c.CP.Client.Delete(ctx, &r); err != nil && !apierrors.IsNotFound(err) {
				t.Logf("cleanup: deleting reservation %s of IPAMClaim %s/%s: %v", r.Name, namespace, name, err)
			}
		}
		if err := c.CP.Client.Delete(ctx, claim); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: deleting IPAMClaim %s/%s: %v", namespace, name, err)
		}
	})
	return claim
}

// newStoppableNetNS is NewNetNS for a sandbox the test removes itself (its
// VM stops): stop deletes the namespace and checks it is gone; the cleanup
// deletes it only if stop did not.
func newStoppableNetNS(t testing.TB, name string) (netns *NetNS, stop func(context.Context) error) {
	t.Helper()
	stopped := false
	mustIP(t, "netns", "add", name)
	t.Cleanup(func() {
		if stopped {
			return
		}
		if out, err := ipCmd(context.Background(), "netns", "delete", name); err != nil {
			t.Logf("deleting network namespace %s: %v: %s", name, err, out)
		}
	})
	mustIP(t, "-n", name, "link", "set", "lo", "up")
	netns = &NetNS{Name: name, Path: "/var/run/netns/" + name}
	return netns, func(ctx context.Context) error {
		if out, err := ipCmd(ctx, "netns", "delete", name); err != nil {
			return fmt.Errorf("ip netns delete %s: %w: %s", name, err, out)
		}
		stopped = true
		_, err := os.Stat(netns.Path)
		switch {
		case err == nil:
			return fmt.Errorf("network namespace %s still at %s after ip netns delete", name, netns.Path)
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("checking that network namespace %s is gone: %w", name, err)
		}
		return nil
	}
}

// expectClaimStatus checks that the claim's status holds exactly ip, in the
// CIDR form IPAMs write, and names pod as the launcher that last attached.
func (c *Cluster) expectClaimStatus(t testing.TB, claim *ipamclaimsv1alpha1.IPAMClaim, ip netip.Prefix, pod *corev1.Pod) {
	t.Helper()
	got := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.CP.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), got); err != nil {
		t.Fatalf("reading IPAMClaim %s/%s: %v", claim.Namespace, claim.Name, err)
	}
	if got.UID != claim.UID {
		t.Fatalf("IPAMClaim %s/%s was recreated (UID %s, created as %s)", claim.Namespace, claim.Name, got.UID, claim.UID)
	}
	if want := []string{ip.String()}; !slices.Equal(got.Status.IPs, want) {
		t.Errorf("IPAMClaim %s/%s status.ips = %q, want %q", claim.Namespace, claim.Name, got.Status.IPs, want)
	}
	if got.Status.OwnerPod == nil || got.Status.OwnerPod.Name != pod.Name {
		t.Errorf("IPAMClaim %s/%s status.ownerPod = %+v, want %s", claim.Namespace, claim.Name, got.Status.OwnerPod, pod.Name)
	}
}

// expectClaimReservations checks network's reservations: exactly one of ip,
// named naming.Reservation(network, ip) and owned by claim (kind IPAMClaim,
// its UID), and exactly one per pod attachment as ExpectReservations checks
// them; nothing else.
func (c *Cluster) expectClaimReservations(t testing.TB, network string, claim *ipamclaimsv1alpha1.IPAMClaim, ip netip.Prefix, pods ...*Attachment) {
	t.Helper()
	got := c.Reservations(t, network)
	var held []ipkv1alpha1.IPReservation
	for _, r := range got {
		if r.Spec.IP == ip.Addr().String() {
			held = append(held, r)
		}
	}
	if len(held) != 1 {
		t.Errorf("network %s: want exactly one IPReservation of the claim's %s, got %d; all: %s", network, ip.Addr(), len(held), describe(got))
	} else {
		r := held[0]
		if want := naming.Reservation(network, ip.Addr()); r.Name != want {
			t.Errorf("reservation of %s is named %q, want %q (naming.Reservation)", ip.Addr(), r.Name, want)
		}
		want := ipkv1alpha1.ReservationOwner{Kind: ipkv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
		if r.Spec.Owner != want || r.Spec.Network != network {
			t.Errorf("reservation %s: network %q owner %+v, want network %q owner %+v (the IPAMClaim)", r.Name, r.Spec.Network, r.Spec.Owner, network, want)
		}
	}
	for _, a := range pods {
		pip := a.IP(t).Addr()
		i := slices.IndexFunc(got, func(r ipkv1alpha1.IPReservation) bool { return r.Spec.IP == pip.String() })
		if i < 0 {
			t.Errorf("network %s: no IPReservation of %s (for %s); all: %s", network, pip, a, describe(got))
			continue
		}
		if want := a.wantSpec(network, pip, a.RT.IfName); !sameSpec(got[i].Spec, want) {
			t.Errorf("reservation %s:\n got spec %+v\nwant spec %+v", got[i].Name, got[i].Spec, want)
		}
	}
	if len(got) != 1+len(pods) {
		t.Errorf("network %s: want %d IPReservations (the claim's and %d pods'), got %d: %s", network, 1+len(pods), len(pods), len(got), describe(got))
	}
}
