// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestCLIWhoHas: who-has finds the holder of an address (a pod, a VM's
// claim, a released or orphaned reservation) and, for an address nobody
// holds, says whether a pool hands it out; exit 1 then, like kubectl get
// of a missing object.
func TestCLIWhoHas(t *testing.T) {
	ns := cp.NewNamespace(t, "cli-wh")
	pool, network := ns, ns+"-net"
	cliPool(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.199.1.0/24", Gateway: "10.199.1.1", Exclude: []string{"10.199.1.200/29"}}, nil)

	pod := cliPod(t, ns, "web-0")
	cliReservation(t, pool, network, "10.199.1.5", podOwner(pod))

	vm, err := newKubeVirt(t).CreateVM(t.Context(), ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1.blue",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "pod16477688c0e"},
	}
	create(t, claim)
	cliReservation(t, pool, network, "10.199.1.6", ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID})
	cliReservation(t, pool, network, "10.199.1.7", goneOwner(ipkeeperv1alpha1.OwnerPod, ns, "old-0"), func(s *ipkeeperv1alpha1.IPReservationSpec) {
		s.ReuseAfter = ptrTime(time.Now().Add(time.Hour))
	})
	cliReservation(t, pool, network, "10.199.1.8", goneOwner(ipkeeperv1alpha1.OwnerPod, ns, "crashed-0"))

	runCLICases(t, []cliCase{
		{name: "pod", args: []string{"who-has", "10.199.1.5"}, code: cli.ExitOK,
			stdout: []string{"IP ", "POOL", "OWNER", "10.199.1.5", pool, network, "Pod " + ns + "/web-0", "node-a", "net1", "held"}},
		{name: "claim of a VM", args: []string{"who-has", "10.199.1.6", "--pool", pool}, code: cli.ExitOK,
			stdout: []string{"IPAMClaim " + ns + "/vm1.blue", "VirtualMachine vm1", "held"}},
		{name: "released, cooling down", args: []string{"who-has", "10.199.1.7"}, code: cli.ExitOK,
			stdout: []string{"Pod " + ns + "/old-0", "released, reusable after"}},
		{name: "owner gone", args: []string{"who-has", "10.199.1.8"}, code: cli.ExitOK,
			stdout: []string{"Pod " + ns + "/crashed-0", "the owner is gone"}},
		{name: "wide", args: []string{"who-has", "10.199.1.5", "-o", "wide"}, code: cli.ExitOK,
			stdout: []string{"RESERVATION", "CONTAINER-ID", pool + ".10-199-1-5", string(pod.UID), "c0ffee"}},
		{name: "json", args: []string{"who-has", "10.199.1.6", "-o", "json"}, code: cli.ExitOK,
			checkExtra: func(t *testing.T, r cliResult) {
				var hs []cli.Holder
				if err := json.Unmarshal([]byte(r.out), &hs); err != nil {
					t.Fatalf("-o json is not a JSON list of holders: %v", err)
				}
				if len(hs) != 1 || hs[0].Owner.UID != claim.UID || hs[0].VM != "VirtualMachine vm1" || hs[0].Pool != pool || hs[0].OwnerExists == nil || !*hs[0].OwnerExists {
					t.Errorf("holders = %+v, want one: claim %s of VirtualMachine vm1 in pool %s, existing", hs, claim.UID, pool)
				}
			}},
		{name: "namespace narrows to owners there", args: []string{"who-has", "10.199.1.5", "-n", "default"}, code: cli.ExitError,
			stderr: []string{"no reservation holds 10.199.1.5 for an owner in namespace default; 1 reservation(s) of it exist elsewhere"}},
		{name: "another network", args: []string{"who-has", "10.199.1.5", "--network", "elsewhere"}, code: cli.ExitError,
			stderr: []string{`no reservation holds 10.199.1.5 on network "elsewhere"; 1 reservation(s) of it exist elsewhere`}},
		{name: "free", args: []string{"who-has", "10.199.1.9"}, code: cli.ExitError,
			stderr: []string{"no reservation holds 10.199.1.9: it is free in IPPool " + pool + ", range 10.199.1.0/24 (10.199.1.1-10.199.1.254)"}},
		{name: "gateway", args: []string{"who-has", "10.199.1.1"}, code: cli.ExitError,
			stderr: []string{"IPPool " + pool + " covers it but does not hand it out", "gateway"}},
		{name: "excluded", args: []string{"who-has", "10.199.1.201"}, code: cli.ExitError,
			stderr: []string{"does not hand it out", "exclude"}},
		{name: "no pool covers it", args: []string{"who-has", "192.0.2.77"}, code: cli.ExitError,
			stderr: []string{"no reservation holds 192.0.2.77, and no IPPool covers it"}},
		{name: "not an IP", args: []string{"who-has", "10.199.1"}, code: cli.ExitUsage,
			stderr: []string{`IP "10.199.1": not an IP address`}},
		{name: "no IP", args: []string{"who-has"}, code: cli.ExitUsage,
			stderr: []string{"who-has takes one IP address, got 0 arguments"}},
		{name: "bad output", args: []string{"who-has", "10.199.1.5", "-o", "xml"}, code: cli.ExitUsage,
			stderr: []string{`-o "xml"`}},
	})
}
