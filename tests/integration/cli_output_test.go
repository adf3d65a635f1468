// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestCLIOutputFormats: the list commands print their rows with
// cli-runtime's printers as kubectl get does: jsonpath and go-template
// read a List of the -o json rows, custom-columns one row per holder,
// -o name the objects kubectl get takes; --as still applies; a bad -o
// exits 2 and names the value.
func TestCLIOutputFormats(t *testing.T) {
	ns := cp.NewNamespace(t, "cli-out")
	pool, network := ns, ns+"-net"
	cliPool(t, pool, ipkeeperv1alpha1.PoolRange{Range: "10.199.8.0/24"}, nil)
	pod := cliPod(t, ns, "web-0")
	r := cliReservation(t, pool, network, "10.199.8.5", podOwner(pod))
	reservationName := "ipreservation.ipkeeper.io/" + r.Name + "\n"
	const nobody = "ipkeeper-cli-nobody"

	runCLICases(t, []cliCase{
		{name: "jsonpath", args: []string{"who-has", "10.199.8.5", "-o", "jsonpath={.items[0].owner.name} {.items[0].node}"}, code: cli.ExitOK,
			checkExtra: equalOut("web-0 node-a")},
		{name: "jsonpath-as-json", args: []string{"who-has", "10.199.8.5", "-o", "jsonpath-as-json={.items[*].ip}"}, code: cli.ExitOK,
			checkExtra: func(t *testing.T, r cliResult) {
				var ips []string
				if err := json.Unmarshal([]byte(r.out), &ips); err != nil || !slices.Equal(ips, []string{"10.199.8.5"}) {
					t.Errorf("ips %q (%v), want [10.199.8.5]", ips, err)
				}
			}},
		{name: "go-template", args: []string{"who-has", "10.199.8.5", "-o", "go-template={{range .items}}{{.interface}}{{end}}"}, code: cli.ExitOK,
			checkExtra: equalOut("net1")},
		{name: "custom-columns", args: []string{"who-has", "10.199.8.5", "-o", "custom-columns=ADDRESS:.ip,OWNER:.owner.name,VM:.vm"}, code: cli.ExitOK,
			checkExtra: func(t *testing.T, r cliResult) {
				lines := strings.Split(strings.TrimSpace(r.out), "\n")
				if len(lines) != 2 || strings.Fields(lines[0])[0] != "ADDRESS" || !slices.Equal(strings.Fields(lines[1]), []string{"10.199.8.5", "web-0", "<none>"}) {
					t.Errorf("custom columns %q, want a header and the row 10.199.8.5 web-0 <none>", lines)
				}
			}},
		{name: "name", args: []string{"who-has", "10.199.8.5", "-o", "name"}, code: cli.ExitOK,
			checkExtra: equalOut(reservationName)},
		{name: "pools by name", args: []string{"pools", pool, "-o", "name"}, code: cli.ExitOK,
			checkExtra: equalOut("ippool.ipkeeper.io/" + pool + "\n")},
		{name: "why by name", args: []string{"why", "pod", "web-0", "-n", ns, "-o", "name"}, code: cli.ExitOK,
			checkExtra: equalOut("pod/web-0\n")},
		{name: "as a user without RBAC", args: []string{"who-has", "10.199.8.5", "--as", nobody, "-o", "name"}, code: cli.ExitError,
			stderr: []string{"forbidden", `User "` + nobody + `"`}},
		{name: "as a user in system:masters", args: []string{"who-has", "10.199.8.5", "--as", nobody, "--as-group", "system:masters", "-o", "jsonpath={.items[0].pool}"}, code: cli.ExitOK,
			checkExtra: equalOut(pool)},
		{name: "unknown format", args: []string{"who-has", "10.199.8.5", "-o", "xml"}, code: cli.ExitUsage,
			stderr: []string{`-o "xml": who-has accepts wide, json, yaml, name, jsonpath=`}},
		{name: "bad jsonpath", args: []string{"who-has", "10.199.8.5", "-o", "jsonpath={.items[0"}, code: cli.ExitUsage,
			stderr: []string{`-o "jsonpath={.items[0"`, "unterminated"}},
		{name: "bad custom-columns", args: []string{"pools", "-o", "custom-columns=NAME"}, code: cli.ExitUsage,
			stderr: []string{`-o "custom-columns=NAME"`, `column "NAME": want HEADER:JSONPATH`}},
		{name: "template without a template", args: []string{"leaks", "-o", "jsonpath="}, code: cli.ExitUsage,
			stderr: []string{`-o "jsonpath="`}},
	})
}

// TestCLICompletion: the __complete protocol kubectl_complete-ipkeeper
// calls completes names from the API server: pools' IPPools, why pod's
// pods in -n.
func TestCLICompletion(t *testing.T) {
	ns := cp.NewNamespace(t, "cli-comp")
	cliPool(t, ns, ipkeeperv1alpha1.PoolRange{Range: "10.199.9.0/24"}, nil)
	cliPod(t, ns, "web-0")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"pools", ""}, ns + "\n"},
		{[]string{"why", "pod", "-n", ns, ""}, "web-0\n"},
		{[]string{"why", "po", "-n", ns, ""}, "web-0\n"},
	} {
		// The word to complete comes last, after --kubeconfig.
		args := append([]string{"__complete"}, tt.args[:len(tt.args)-1]...)
		args = append(args, "--kubeconfig", cp.KubeconfigPath, tt.args[len(tt.args)-1])
		var out, errOut strings.Builder
		code := cli.Main(t.Context(), args, cli.Streams{Out: &out, Err: &errOut})
		if code != cli.ExitOK || !strings.Contains(out.String(), tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %q", args, code, out.String(), errOut.String(), tt.want)
		}
	}
}

// equalOut checks stdout is want exactly.
func equalOut(want string) func(t *testing.T, r cliResult) {
	return func(t *testing.T, r cliResult) {
		if r.out != want {
			t.Errorf("stdout %q, want %q", r.out, want)
		}
	}
}

// TestCLIWhyVMJSON: why vm -o json carries what the text says: the claim,
// its addresses, the reservations and the reasons (Next), and the text's
// lines are the report's sections.
func TestCLIWhyVMJSON(t *testing.T) {
	e := newWhyEnv(t)
	vm, _ := e.vmWithClaim(t, "vm-json", "10.199.6.40")
	text, rep := whyTextAndJSON(t, e.ns, "vm", "vm-json")
	f := rep.VM
	if f == nil || f.Name != "vm-json" || f.UID != vm.UID {
		t.Fatalf("report.vm = %+v, want VM vm-json %s", f, vm.UID)
	}
	if len(f.Claims) != 1 || f.Claims[0].Name != "vm-json.blue" || !f.Claims[0].Found || f.Claims[0].Claim == nil || !slices.Equal(f.Claims[0].Claim.IPs, []string{"10.199.6.40/24"}) {
		t.Fatalf("claims %+v, want vm-json.blue with 10.199.6.40/24", f.Claims)
	}
	if len(f.Reservations) != 1 || f.Reservations[0].IP != "10.199.6.40" || f.Reservations[0].Pool != e.pool {
		t.Fatalf("reservations %+v, want 10.199.6.40 in %s", f.Reservations, e.pool)
	}
	if len(f.Networks) != 1 || f.Networks[0].Claim != "vm-json.blue" || !f.Networks[0].AllowPersistentIPs {
		t.Errorf("networks %+v, want blue keeping its addresses in vm-json.blue", f.Networks)
	}
	if len(rep.Next) == 0 {
		t.Errorf("no reasons (next) in %+v", rep)
	}
	// The same facts in the text, which is the sections line by line.
	want := []string{
		"IPAMClaim " + f.Claims[0].Name + ": status.ips: " + strings.Join(f.Claims[0].Claim.IPs, ", "),
		f.Reservations[0].IP + " in pool " + f.Reservations[0].Pool, "reservation " + f.Reservations[0].Reservation,
	}
	for _, n := range rep.Next {
		want = append(want, "Next: "+n)
	}
	for _, sec := range rep.Sections {
		want = append(want, sec.Title+":")
		for _, l := range sec.Lines {
			if sec.Title != "VM" && sec.Title != "Events" && sec.Title != "Reservations" { // ages move on between the runs
				want = append(want, "  "+l)
			}
		}
	}
	for _, w := range want {
		if !strings.Contains(text.out, w) {
			t.Errorf("the text lacks %q of -o json\n%s", w, text.out)
		}
	}
}

// TestCLIWhyClaimJSON: why ipamclaim -o json carries the claim typed
// (claim), and its text is rendered from it.
func TestCLIWhyClaimJSON(t *testing.T) {
	e := newWhyEnv(t)
	_, claim := e.vmWithClaim(t, "vm-cj", "10.199.6.41")
	text, rep := whyTextAndJSON(t, e.ns, "ipamclaim", claim.Name)
	c := rep.Claim
	if c == nil || c.Name != "vm-cj.blue" || c.UID != claim.UID || !slices.Equal(c.IPs, []string{"10.199.6.41/24"}) ||
		!strings.Contains(c.Owner, "VirtualMachine vm-cj") || !c.OwnerExists || len(c.Reservations) != 1 || c.Reservations[0].IP != "10.199.6.41" {
		t.Fatalf("report.claim = %+v, want vm-cj.blue of VirtualMachine vm-cj with 10.199.6.41", c)
	}
	for _, w := range []string{"Owner:\n  " + c.Owner + "\n", "  status.ips: " + c.IPs[0], c.Reservations[0].IP + " in pool " + c.Reservations[0].Pool, "Next: " + rep.Next[0]} {
		if !strings.Contains(text.out, w) {
			t.Errorf("the text lacks %q of -o json\n%s", w, text.out)
		}
	}
}

// vmWithClaim makes a stopped VM on network blue with its claim holding
// ip, and the claim's reservation.
func (e *whyEnv) vmWithClaim(t *testing.T, name, ip string) (*kubevirtv1.VirtualMachine, *ipamclaimsv1alpha1.IPAMClaim) {
	t.Helper()
	vm, err := newKubeVirt(t).CreateVM(t.Context(), e.ns, name, framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := e.claim(t, name+".blue", "blue", vm, ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{ip + "/24"}, Conditions: allocated(metav1.ConditionTrue, "SuccessfulAllocation", "")})
	e.claimReservation(t, claim, ip)
	return vm, claim
}

// whyTextAndJSON runs `why KIND/NAME` (text) and `why KIND NAME -o json`
// (the command form, which gives the same report) and decodes the latter.
func whyTextAndJSON(t *testing.T, ns, kind, name string) (cliResult, cli.Report) {
	t.Helper()
	text := runCLI(t, "why", kind+"/"+name, "-n", ns)
	r := runCLI(t, "why", kind, name, "-n", ns, "-o", "json")
	if text.code != cli.ExitOK || r.code != cli.ExitOK {
		t.Fatalf("why %s: text %s\njson %s", kind, text, r)
	}
	var rep cli.Report
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, r.out)
	}
	return text, rep
}

// TestCLIWhyPodJSON: why pod -o json carries the pod typed (pod): its
// attachments with their NAD's facts and its reservations, and its text
// is rendered from it.
func TestCLIWhyPodJSON(t *testing.T) {
	e := newWhyEnv(t)
	pod := cliPod(t, e.ns, "holder", withNetworks("plain"))
	cliReservation(t, e.pool, "plain", "10.199.6.42", podOwner(pod))
	text, rep := whyTextAndJSON(t, e.ns, "pod", "holder")
	p := rep.Pod
	if p == nil || p.UID != pod.UID || len(p.Networks) != 1 || p.Networks[0].CNINetwork != "plain" || p.Networks[0].AllowPersistentIPs ||
		len(p.Reservations) != 1 || p.Reservations[0].IP != "10.199.6.42" || len(rep.Next) != 1 {
		t.Fatalf("report %+v, pod %+v: want network plain without persistent IPs, 10.199.6.42 and one Next", rep, p)
	}
	for _, w := range []string{p.Networks[0].NAD + `: CNI network "plain", allowPersistentIPs false`, p.Reservations[0].IP + " in pool " + p.Reservations[0].Pool, "Next: " + rep.Next[0]} {
		if !strings.Contains(text.out, w) {
			t.Errorf("the text lacks %q of -o json\n%s", w, text.out)
		}
	}
}
