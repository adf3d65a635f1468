// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestPodEditorCannotTakeAnotherVMsClaim (issue 53, item 1): a namespace
// user bound to the built-in edit role (update on pods) edits the real
// virt-launcher pod of its own VM, which virt-controller made, so that it
// says it launches another VM of the namespace, and appends a networks
// element referencing that VM's claim. Each edit is refused by the
// launcher-identity policy (the identity the agent checks is frozen on
// launchers: the controller reference to the VMI, kubevirt.io/created-by,
// kubevirt.io, vm.kubevirt.io/name, kubevirt.io/domain), or, where the
// policy lets it through (removing the reference alone, as the garbage
// collector does; appending the element alone), the ADD of the element is
// refused with CNI code 7 (also for the pod's own claim once its reference
// is gone). No edit gets the running victim's address.
func TestPodEditorCannotTakeAnotherVMsClaim(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	e := startKubeVirtEnv(t)
	agent := cp.StartAgent(t, "node-edit")
	network := "edit-" + e.ns
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.59.0.0/24","network_name":%q}}`, network, network)
	e.nad(t, "blue", conf)
	ifName := kubevirt.PodInterfaceName("blue")
	start := func(name string) *corev1.Pod {
		t.Helper()
		vm := framework.NewVM(e.ns, name, framework.VMNetwork{Name: "blue", NAD: "blue"})
		if err := cp.Client.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		e.waitClaim(t, name+".blue")
		_, launcher, err := e.kv.Start(ctx, vm, agent.Node)
		if err != nil {
			t.Fatal(err)
		}
		return launcher
	}
	victim := start("vm-victim")
	res, err := agent.Add(ctx, victim, ifName, json.RawMessage(conf))
	if err != nil {
		t.Fatalf("the victim's launcher: %v", err)
	}
	victimIPs := resultIPs(t, res)

	// The tenant: edit in its namespace, as a ServiceAccount's token.
	const sa = "pod-editor"
	cfg := cp.ServiceAccountConfig(t, e.ns, sa, "")
	user, _ := framework.ServiceAccountUser(e.ns, sa)
	u, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	waitAggregated(t, "edit")
	bindInNamespace(t, e.ns, sa, "ClusterRole", "edit")
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = u.Get(ctx, client.ObjectKeyFromObject(victim), &corev1.Pod{})
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%s, bound to edit in %s, cannot read pods there (last: %v)", user, e.ns, last)
	}

	const stolenIf = "podstolen"
	stolen := func(p *corev1.Pod) {
		elems := []map[string]any{}
		if err := json.Unmarshal([]byte(p.Annotations[multus.Annotation]), &elems); err != nil {
			t.Fatalf("networks annotation of %s: %v", p.Name, err)
		}
		elems = append(elems, map[string]any{"name": "blue", "namespace": e.ns, "interface": stolenIf, "ipam-claim-reference": "vm-victim.blue"})
		annot, _ := json.Marshal(elems)
		p.Annotations[multus.Annotation] = string(annot)
	}
	withoutRef := func(p *corev1.Pod) {
		p.OwnerReferences = slices.DeleteFunc(p.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Kind == "VirtualMachineInstance" })
	}
	renameRef := func(p *corev1.Pod) {
		for i := range p.OwnerReferences {
			if p.OwnerReferences[i].Kind == "VirtualMachineInstance" {
				p.OwnerReferences[i].Name = "vm-victim" // the UID kept
			}
		}
	}
	domain := func(p *corev1.Pod) { p.Annotations[kubevirtv1.DomainAnnotation] = "vm-victim" }
	noAppLabel := func(p *corev1.Pod) { delete(p.Labels, kubevirtv1.AppLabel) }
	noCreatedBy := func(p *corev1.Pod) { delete(p.Labels, kubevirtv1.CreatedByLabel) }
	vmiName := func(p *corev1.Pod) { p.Labels[kubevirt.VMINameLabel] = "vm-victim" }

	tests := []struct {
		name  string
		edits []func(*corev1.Pod)
		// admitted: the policy lets the edit through (it gives no claim
		// access): the ADD must then be refused.
		admitted bool
	}{
		{"owner reference removed, domain set to the victim, kubevirt.io dropped", []func(*corev1.Pod){withoutRef, domain, noAppLabel, stolen}, false},
		{"owner reference renamed to the victim, uid kept, kubevirt.io dropped", []func(*corev1.Pod){renameRef, noAppLabel, stolen}, false},
		{"owner reference renamed to the victim, uid kept", []func(*corev1.Pod){renameRef, stolen}, false},
		{"kubevirt.io/domain set to the victim", []func(*corev1.Pod){domain, stolen}, false},
		{"kubevirt.io label dropped", []func(*corev1.Pod){noAppLabel, stolen}, false},
		{"vm.kubevirt.io/name set to the victim", []func(*corev1.Pod){vmiName, stolen}, false},
		{"identity removed entirely, domain set to the victim", []func(*corev1.Pod){withoutRef, noCreatedBy, domain, stolen}, false},
		{"owner reference removed alone", []func(*corev1.Pod){withoutRef, stolen}, true},
		{"only a networks element with the victim's claim", []func(*corev1.Pod){stolen}, true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			launcher := start(fmt.Sprintf("vm-mine-%d", i))
			if !tc.admitted {
				// The identity edit alone: the policy refuses it (ipkeeper's
				// pod webhook, which runs first and may refuse the edit of
				// claim references, has nothing to say about it).
				var alone corev1.Pod
				if err := u.Get(ctx, client.ObjectKeyFromObject(launcher), &alone); err != nil {
					t.Fatal(err)
				}
				for _, edit := range tc.edits[:len(tc.edits)-1] {
					edit(&alone)
				}
				policyRefused(t, "edit its own launcher's identity", u.Update(ctx, &alone), user+" may not make a pod say it launches")
			}
			var p corev1.Pod
			if err := u.Get(ctx, client.ObjectKeyFromObject(launcher), &p); err != nil {
				t.Fatal(err)
			}
			for _, edit := range tc.edits {
				edit(&p)
			}
			err := u.Update(ctx, &p)
			switch {
			case err != nil && tc.admitted && strings.Contains(err.Error(), "ipkeeper-launcher-identity"):
				t.Fatalf("%s's edit: %v; want it let through by the launcher-identity policy (the ADD refuses it)", user, err)
			case err != nil:
				// Refused by admission: the policy, or first ipkeeper's
				// mutating pod webhook, which refuses a launcher a reference
				// to a claim it judges not the launcher's.
				if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
					t.Fatalf("%s's edit: %v; want it admitted, or refused by admission", user, err)
				}
				t.Logf("refused by admission: %v", err)
				return
			case !tc.admitted:
				t.Errorf("%s's edit of its own launcher was admitted; want it refused by ipkeeper-launcher-identity", user)
			}
			got, err := agent.Add(ctx, &p, stolenIf, json.RawMessage(conf))
			if err == nil {
				ips := resultIPs(t, got)
				if slices.ContainsFunc(ips, func(ip netip.Addr) bool { return slices.Contains(victimIPs, ip) }) {
					t.Fatalf("the edited launcher got the running victim's address %v (the victim has %v)", ips, victimIPs)
				}
				t.Fatalf("the edited launcher's ADD of the victim's claim returned %v; want it refused", ips)
			}
			if cniCode(err) != 7 {
				t.Fatalf("ADD of the victim's claim by the edited launcher: %v; want CNI code 7", err)
			}
			mustContain(t, err, "vm-victim.blue", "belongs to VirtualMachine vm-victim")
		})
	}
	// What the policy lets through, removing the reference (as the garbage
	// collector does when a VMI is orphaned), takes away claim access: the
	// pod's own claim is refused it at ADD, whatever its domain says.
	t.Run("owner reference removed, its own claim", func(t *testing.T) {
		launcher := start("vm-unowned")
		var p corev1.Pod
		if err := u.Get(ctx, client.ObjectKeyFromObject(launcher), &p); err != nil {
			t.Fatal(err)
		}
		withoutRef(&p)
		if err := u.Update(ctx, &p); err != nil {
			t.Fatalf("%s removing its launcher's controller reference: %v; want it admitted", user, err)
		}
		// The agent reads pods from its cache, which has the edit a moment
		// later; meanwhile it answers as for the pod before it.
		var err error
		if werr := framework.Eventually(ctx, 10*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			var got *types100.Result
			got, err = agent.Add(ctx, &p, ifName, json.RawMessage(conf))
			if err == nil && slices.ContainsFunc(resultIPs(t, got), func(ip netip.Addr) bool { return slices.Contains(victimIPs, ip) }) {
				return false, fmt.Errorf("the launcher got the victim's address %v", resultIPs(t, got))
			}
			return err != nil, nil
		}); werr != nil {
			t.Fatalf("a launcher without its controller reference still gets its claim's addresses: %v", werr)
		}
		if cniCode(err) != 7 {
			t.Fatalf("ADD of a launcher without its controller reference: %v; want CNI code 7", err)
		}
		mustContain(t, err, "vm-unowned.blue", "no controller reference to a VirtualMachineInstance")
	})
}
