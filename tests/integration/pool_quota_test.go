// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestNamespaceQuotaCountsRetainedAddresses is issue 53 item 3: a
// namespace that never has more than one VM at a time used to empty a pool
// by creating VMs with ipkeeper.io/retain-addresses-for and deleting them
// under new names. With spec.maxAddressesPerNamespace on the pool, the
// retained addresses count: once the namespace holds the quota, its next
// VM's claim is left unfilled with QuotaExceeded and its next pod's ADD is
// refused (both naming the pool, the namespace and the quota), while
// another namespace still draws from the pool and the deleted VM made
// again under its name gets its kept address back (that holds nothing
// more). The pool's status and kubectl ipkeeper pools show the usage.
func TestNamespaceQuotaCountsRetainedAddresses(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t, func(o *manager.Options) { o.MaxAddressRetention = 2 * time.Hour })
	other := cp.NewNamespace(t, "quota-other")
	suffix := e.ns[len(e.ns)-5:]
	name, network := "quota-"+suffix, "quota-net-"+suffix
	const quota = 2
	// Unstructured, so the test compiles and runs against an API without
	// the field: the API server then drops it, and nothing is refused.
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipkeeper.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"ranges":                   []any{map[string]any{"range": "10.106.0.0/28"}},
			"maxAddressesPerNamespace": int64(quota),
		},
	}}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	e.nad(t, "blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":%q}}`, network, name))
	removeReservationsAtEnd(t, func(r *ipkeeperv1alpha1.IPReservation) bool { return r.Spec.Pool == name })
	createVM := func(vm string) *kubevirtv1.VirtualMachine {
		t.Helper()
		v := framework.NewVM(e.ns, vm, framework.VMNetwork{Name: "blue", NAD: "blue"})
		v.Annotations = map[string]string{claimstatus.RetentionAnnotation: "1h"}
		if err := cp.Client.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	held := func(ns string) int {
		t.Helper()
		n := 0
		for _, r := range reservationsInPool(t, name) {
			if r.Spec.Owner.Namespace == ns {
				n++
			}
		}
		return n
	}

	// One VM at a time, each deleted with its addresses retained.
	var retained [][]string
	for i := range quota {
		vm := createVM(fmt.Sprintf("vm%d", i))
		c := waitFilled(t, e.ns, vm.Name+".blue")
		retained = append(retained, c.Status.IPs)
		if err := cp.Client.Delete(ctx, vm); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the deleted VM's claim to go", func(ctx context.Context) (bool, error) {
			_, err := e.claim(ctx, vm.Name+".blue")
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	}
	if got := held(e.ns); got != quota {
		t.Fatalf("namespace %s holds %d reservations of IPPool %s after deleting its VMs, want their %d retained ones", e.ns, got, name, quota)
	}

	// The next VM's claim is refused: the retained addresses count.
	createVM("vm-next")
	waitFor(t, "the next VM's claim to be made", func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, "vm-next.blue")
		return err == nil, client.IgnoreNotFound(err)
	})
	c := waitCondition(t, e.ns, "vm-next.blue", claimstatus.ReasonQuotaExceeded)
	for _, want := range []string{fmt.Sprintf("IPPool %q", name), fmt.Sprintf("namespace %q", e.ns), "spec.maxAddressesPerNamespace", fmt.Sprint(quota)} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("claim vm-next.blue IPsAllocated message %q does not name %s", c.Message, want)
		}
	}
	// So is a pod's ADD in the namespace, by the agent.
	a := cp.StartAgent(t, "node-quota")
	conf := poolConf(network, name)
	pod := cp.CreatePods(t, e.ns, a.Node, "p", 1)[0]
	_, err := a.Add(ctx, pod, "net1", conf)
	mustContain(t, err, fmt.Sprintf("IPPool %q", name), fmt.Sprintf("namespace %q", e.ns), "spec.maxAddressesPerNamespace")
	if got := held(e.ns); got != quota {
		t.Fatalf("namespace %s holds %d reservations of IPPool %s after the refused ADD, want %d", e.ns, got, name, quota)
	}
	// Another namespace has a quota of its own.
	theirs := cp.CreatePods(t, other, a.Node, "p", 1)[0]
	if _, err := a.Add(ctx, theirs, "net1", conf); err != nil {
		t.Fatalf("ADD in namespace %s, which holds nothing of IPPool %s: %v", other, name, err)
	}
	// The first VM made again under its name gets back what it kept.
	createVM("vm0")
	if again := waitFilled(t, e.ns, "vm0.blue"); !slices.Equal(again.Status.IPs, retained[0]) {
		t.Fatalf("VM vm0 made again records %v, want its retained %v", again.Status.IPs, retained[0])
	}
	if got := held(e.ns); got != quota {
		t.Fatalf("namespace %s holds %d reservations of IPPool %s, want %d", e.ns, got, name, quota)
	}

	// The pool's status and kubectl ipkeeper pools show it.
	waitFor(t, "the pool's status to show the namespace at its quota", func(ctx context.Context) (bool, error) {
		var p ipkeeperv1alpha1.IPPool
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			return false, err
		}
		return slices.Contains(p.Status.Namespaces, ipkeeperv1alpha1.NamespaceUsage{Namespace: e.ns, Used: quota}), nil
	})
	runCLICases(t, []cliCase{
		{name: "pools shows the quota", args: []string{"pools", name}, code: cli.ExitOK,
			stdout: []string{"QUOTA", fmt.Sprintf("%d/namespace", quota)}},
		{name: "pools -o wide shows the namespace at its quota", args: []string{"pools", name, "-o", "wide"}, code: cli.ExitOK,
			stdout: []string{fmt.Sprintf("%s %d/%d", e.ns, quota, quota)}},
	})
}

// reservationsInPool lists the reservations of pool, live.
func reservationsInPool(t testing.TB, pool string) []ipkeeperv1alpha1.IPReservation {
	t.Helper()
	var list ipkeeperv1alpha1.IPReservationList
	if err := cp.Client.List(context.Background(), &list, client.MatchingFields{"spec.pool": pool}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}
