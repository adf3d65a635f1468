// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkagent "github.com/ipkeeper/ipkeeper/internal/node/agent"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestVMRequestedAddresses: an imported VM asks for its old addresses with
// network.kubevirt.io/addresses. A usable, free address is reserved by the
// controller and recorded on the claim before the VM first runs (the other
// family of the dual-stack network is chosen for it), and the launcher's
// ADD returns it.
// An address someone holds (in this namespace or another) or the network
// does not hand out is refused with a claim condition and an Event, and
// nothing is reserved; the launcher's ADD then fails saying why instead of
// handing out another address.
func TestVMRequestedAddresses(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	// Short: the launchers of refused requests wait for addresses that never come.
	agent := cp.StartAgent(t, "node-req", func(o *ipkagent.Options) { o.ClaimWaitTimeout = 3 * time.Second })
	network := "req-" + e.ns // cluster-scoped pool and reservations: one network per run
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","network_name":%q,"ipRanges":[{"range":"10.78.0.0/24","gateway":"10.78.0.1"},{"range":"fd00:78::/64"}]}}`, network, network)
	e.nad(t, "blue", conf)
	pool := naming.InlinePool(network)

	// Held by a pod of another namespace (a live one: the garbage
	// collector releases what a missing pod holds).
	other := cp.NewNamespace(t, "req-other")
	holder := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "secret-holder"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	if err := cp.Client.Create(ctx, holder); err != nil {
		t.Fatal(err)
	}
	foreign := newReservation(network, "10.78.0.60")
	foreign.Spec.Pool = pool
	foreign.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: other, Name: holder.Name, UID: holder.UID}
	if err := cp.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	// Removed with the test, not left to the garbage collector once the
	// namespace goes: a later test's collector would count that release.
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), foreign) })

	// Usable and free.
	vmA := createVMRequesting(t, e, "vm-a", `{"blue":["10.78.0.50"]}`)
	claimA := waitRequested(t, e, "vm-a.blue", claimstatus.ReasonRequestedReserved)
	if len(claimA.Status.IPs) != 2 || claimA.Status.IPs[0] != "10.78.0.50/24" || !strings.HasPrefix(claimA.Status.IPs[1], "fd00:78::") || !strings.HasSuffix(claimA.Status.IPs[1], "/64") {
		t.Fatalf("claim status.ips = %v, want 10.78.0.50/24 and an address of fd00:78::/64", claimA.Status.IPs)
	}
	for _, s := range claimA.Status.IPs {
		ip := netip.MustParsePrefix(s).Addr()
		var r ipkeeperv1alpha1.IPReservation
		if err := cp.Client.Get(ctx, keyOf(naming.Reservation(pool, ip)), &r); err != nil {
			t.Fatalf("reservation of %s: %v", ip, err)
		}
		if r.Spec.Owner.UID != claimA.UID || r.Spec.Pool != pool || r.Spec.Network != network {
			t.Fatalf("reservation of %s = %+v, want pool %s network %s owned by the claim", ip, r.Spec, pool, network)
		}
	}
	waitEvent(t, vmA, string(claimaddrs.ReasonRequestedReserved), "10.78.0.50")
	_, podA, err := e.kv.Start(ctx, vmA, agent.Node)
	if err != nil {
		t.Fatal(err)
	}
	ifName := kubevirt.PodInterfaceName("blue")
	res, err := agent.Add(ctx, podA, ifName, json.RawMessage(conf))
	if err != nil {
		t.Fatalf("launcher ADD: %v", err)
	}
	got := resultIPs(t, res)
	if len(got) != 2 || got[0] != netip.MustParseAddr("10.78.0.50") || got[1] != netip.MustParsePrefix(claimA.Status.IPs[1]).Addr() {
		t.Fatalf("launcher ADD returned %v, want the claim's %v", got, claimA.Status.IPs)
	}
	if n := len(reservationsOf(t, network)); n != 3 {
		t.Fatalf("%d reservations on the network, want the claim's 2 and the foreign one", n)
	}

	refusals := []struct {
		vm, request, reason, message string
	}{
		{"vm-b", `{"blue":["10.78.0.50/24"]}`, claimstatus.ReasonRequestedTaken, "10.78.0.50 on network \"blue\" is already reserved by IPAMClaim " + e.ns + "/vm-a.blue"},
		{"vm-c", `{"blue":["10.78.0.60"]}`, claimstatus.ReasonRequestedTaken, "reserved by a workload in another namespace"},
		{"vm-d", `{"blue":["192.168.5.5"]}`, claimstatus.ReasonRequestedOutsidePool, "192.168.5.5 is outside every range of IPPool"},
		{"vm-e", `{"blue":["10.78.0.1"]}`, claimstatus.ReasonRequestedOutsidePool, "10.78.0.1 is the gateway"},
		{"vm-f", `{"blue":["10.78.0.7","10.78.0.8"]}`, claimstatus.ReasonRequestedInvalid, "same IP family"},
	}
	for _, tc := range refusals {
		t.Run(tc.reason+"-"+tc.vm, func(t *testing.T) {
			// Each waits out the agent's claim wait: side by side.
			t.Parallel()
			vm := createVMRequesting(t, e, tc.vm, tc.request)
			claim := waitRequested(t, e, tc.vm+".blue", tc.reason)
			cond := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested)
			if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, tc.message) {
				t.Fatalf("condition = %+v, want False with %q", cond, tc.message)
			}
			if strings.Contains(cond.Message, other) || strings.Contains(cond.Message, holder.Name) {
				t.Fatalf("condition message names another namespace's object: %s", cond.Message)
			}
			if len(claim.Status.IPs) != 0 {
				t.Fatalf("claim status.ips = %v, want none", claim.Status.IPs)
			}
			waitEvent(t, vm, string(claimaddrs.ReasonRequestedNotHonoured), tc.reason)
			for _, r := range reservationsOf(t, network) {
				if r.Spec.Owner.UID == claim.UID {
					t.Fatalf("reservation %s was made for a refused request", r.Name)
				}
			}
			_, pod, err := e.kv.Start(ctx, vm, agent.Node)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := agent.Add(ctx, pod, ifName, json.RawMessage(conf)); err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("launcher ADD of a refused request: %v, want a failure naming %s", err, tc.reason)
			}
			for _, r := range reservationsOf(t, network) {
				if r.Spec.Owner.UID == claim.UID {
					t.Fatalf("the agent reserved %s for a claim whose request was refused", r.Spec.IP)
				}
			}
		})
	}
}

// waitRequested waits for the claim's RequestedAddresses condition to have reason.
func waitRequested(t *testing.T, e *kvEnv, name, reason string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c *ipamclaimsv1alpha1.IPAMClaim
	var cond *metav1.Condition
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		if c, err = e.claim(ctx, name); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		cond = meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionRequested)
		return cond != nil && cond.Reason == reason, nil
	}); err != nil {
		t.Fatalf("claim %s: condition %s = %+v, want reason %s: %v", name, claimstatus.ConditionRequested, cond, reason, err)
	}
	if _, ok := c.Annotations[claimstatus.RequestedAnnotation]; !ok {
		t.Fatalf("claim %s has no %s annotation", name, claimstatus.RequestedAnnotation)
	}
	return c
}
