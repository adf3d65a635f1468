// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestCLILeaks: leaks lists the reservations whose owner (that UID) is
// gone, of every owner kind, and released ones: cooling while their
// cooldown runs, leaked once it is over and they still exist. Reservations
// of live owners are not listed.
func TestCLILeaks(t *testing.T) {
	ns := cp.NewNamespace(t, "cli-leaks")
	pool, network := ns, ns+"-net"
	cliPool(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.199.5.0/24"}, nil)

	live := cliPod(t, ns, "live-0")
	cliReservation(t, pool, network, "10.199.5.10", podOwner(live))
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept.blue"}, Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"}}
	create(t, claim)
	cliReservation(t, pool, network, "10.199.5.11", ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID})
	// Same name as a live pod, another UID: the old pod is gone.
	cliReservation(t, pool, network, "10.199.5.20", goneOwner(ipkeeperv1alpha1.OwnerPod, ns, "live-0"))
	cliReservation(t, pool, network, "10.199.5.21", goneOwner(ipkeeperv1alpha1.OwnerIPAMClaim, ns, "vm9.blue"))
	cliReservation(t, pool, network, "10.199.5.22", goneOwner(ipkeeperv1alpha1.OwnerIPAddressClaim, ns, "machine-0"))
	cliReservation(t, pool, network, "10.199.5.23", goneOwner(ipkeeperv1alpha1.OwnerPod, ns, "cool-0"), func(s *ipkeeperv1alpha1.IPReservationSpec) {
		s.ReuseAfter = ptrTime(time.Now().Add(time.Hour))
	})
	cliReservation(t, pool, network, "10.199.5.24", podOwner(live), func(s *ipkeeperv1alpha1.IPReservationSpec) {
		s.InterfaceName = "net2"
		s.ReuseAfter = ptrTime(time.Now().Add(-5 * time.Minute))
	})

	line := func(out, ip string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, " "+ip+" ") {
				return l
			}
		}
		return ""
	}
	states := func(want map[string]string) func(t *testing.T, r cliResult) {
		return func(t *testing.T, r cliResult) {
			for ip, state := range want {
				l := line(r.out, ip)
				switch {
				case state == "" && l != "":
					t.Errorf("%s is listed: %q", ip, l)
				case state != "" && !strings.Contains(l, " "+state+" "):
					t.Errorf("%s: line %q, want state %s", ip, l, state)
				}
			}
		}
	}
	runCLICases(t, []cliCase{
		{name: "table", args: []string{"leaks", "-n", ns}, code: cli.ExitOK,
			stdout: []string{"RESERVATION", "POOL", "OWNER", "STATE", "AGE", "Pod " + ns + "/live-0", "IPAMClaim " + ns + "/vm9.blue", "IPAddressClaim " + ns + "/machine-0"},
			checkExtra: states(map[string]string{
				"10.199.5.10": "", "10.199.5.11": "",
				"10.199.5.20": "leaked", "10.199.5.21": "leaked", "10.199.5.22": "leaked",
				"10.199.5.23": "cooling", "10.199.5.24": "leaked",
			})},
		{name: "wide says what the GC does", args: []string{"leaks", "-n", ns, "-o", "wide"}, code: cli.ExitOK,
			stdout: []string{"DETAIL", "--gc-grace-period (default 2m)", "IPAMClaim gone; the GC releases it at once", "reusable in ", "cooldown over 5m"}}, // 5m or 5m1s: the test takes time
		{name: "json", args: []string{"leaks", "-n", ns, "-o", "json"}, code: cli.ExitOK,
			checkExtra: func(t *testing.T, r cliResult) {
				var leaks []cli.Leak
				if err := json.Unmarshal([]byte(r.out), &leaks); err != nil {
					t.Fatalf("-o json: %v", err)
				}
				got := map[string]string{}
				for _, l := range leaks {
					got[l.IP] = l.State
				}
				want := map[string]string{"10.199.5.20": "leaked", "10.199.5.21": "leaked", "10.199.5.22": "leaked", "10.199.5.23": "cooling", "10.199.5.24": "leaked"}
				if len(got) != len(want) {
					t.Errorf("leaks %v, want %v", got, want)
				}
				for ip, s := range want {
					if got[ip] != s {
						t.Errorf("%s: state %q, want %q", ip, got[ip], s)
					}
				}
			}},
		{name: "all namespaces", args: []string{"leaks", "-A"}, code: cli.ExitOK,
			stdout: []string{"IPAMClaim " + ns + "/vm9.blue"}},
		{name: "nothing in another namespace", args: []string{"leaks", "-n", "kube-public"}, code: cli.ExitOK,
			stderr: []string{"No leaked or cooling reservations found."}, notStdout: []string{ns}},
		{name: "no arguments", args: []string{"leaks", "extra"}, code: cli.ExitUsage,
			stderr: []string{`leaks takes no arguments, got "extra"`}},
		{name: "-A with -n", args: []string{"leaks", "-A", "-n", ns}, code: cli.ExitUsage,
			stderr: []string{"-A and -n " + ns + " exclude each other"}},
	})
}
