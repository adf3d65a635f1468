// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// foreignFinalizer is another controller's: uninstall never touches it.
const foreignFinalizer = "example.com/keep-me"

// uninstallObjects are the objects of TestCLIUninstall, each with the
// finalizers it is seeded with.
type uninstallObjects struct {
	ns                             string
	pool                           *ipkeeperv1alpha1.IPPool
	managed, extensions            *ipamclaimsv1alpha1.IPAMClaim
	addrClaim                      *ipamv1.IPAddressClaim
	ourAddr, otherAddr             *ipamv1.IPAddress
	seeded                         map[client.Object][]string
	poolRow, retainRow, persistRow string
	releaseRow, protectRow         string
}

// TestCLIUninstall: uninstall removes ipkeeper's finalizers and only
// those (another controller's, ipam-extensions' claims, another
// provider's IPAddresses keep theirs); --dry-run changes nothing; a ready
// controller Deployment or a fresh leader Lease make it refuse unless
// --force; --release-claims also frees the claims ipkeeper manages.
func TestCLIUninstall(t *testing.T) {
	o := newUninstallObjects(t)
	install := o.ns // the install namespace: no controller there yet
	want := []string{o.poolRow, o.retainRow, o.releaseRow, o.protectRow}

	r := runCLI(t, "uninstall", "-n", install, "--dry-run")
	if r.code != cli.ExitOK || !sameRows(tableRows(r.out, o), want) || !strings.Contains(r.err, "Dry run") {
		t.Fatalf("uninstall --dry-run: want rows %q\n%s", want, r)
	}
	o.check(t, o.seeded)

	deployment := readyDeployment(t, install)
	r = runCLI(t, "uninstall", "-n", install)
	if r.code != cli.ExitError || !strings.Contains(r.err, "Deployment "+install+"/"+naming.ControllerName) || !strings.Contains(r.err, "--force") {
		t.Fatalf("uninstall with a ready Deployment: want exit 1 naming it\n%s", r)
	}
	o.check(t, o.seeded)
	r = runCLI(t, "uninstall", "-n", install, "--dry-run")
	if r.code != cli.ExitOK || !sameRows(tableRows(r.out, o), want) || !strings.Contains(r.err, "without --dry-run uninstall refuses") {
		t.Fatalf("uninstall --dry-run with a ready Deployment: want the rows and a warning\n%s", r)
	}

	r = runCLI(t, "uninstall", "-n", install, "--force", "-o", "json")
	if r.code != cli.ExitOK || !sameRows(jsonRows(t, r.out, o), want) {
		t.Fatalf("uninstall --force -o json: want rows %q\n%s", want, r)
	}
	o.check(t, map[client.Object][]string{
		o.pool: {foreignFinalizer}, o.managed: {claims.Finalizer, foreignFinalizer}, o.extensions: {claims.Finalizer},
		o.addrClaim: {foreignFinalizer}, o.ourAddr: nil, o.otherAddr: {capi.ProtectFinalizer},
	})

	deleteObject(t, deployment)
	o.seed(t)
	lease := freshLease(t, install)
	r = runCLI(t, "uninstall", "-n", install)
	if r.code != cli.ExitError || !strings.Contains(r.err, "Lease "+install+"/"+naming.ControllerName) {
		t.Fatalf("uninstall with a fresh Lease: want exit 1 naming it\n%s", r)
	}
	o.check(t, o.seeded)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}
	if err := cp.Client.Update(context.Background(), lease); err != nil {
		t.Fatalf("making the Lease stale: %v", err)
	}

	r = runCLI(t, "uninstall", "-n", install, "--release-claims")
	want = append(want, o.persistRow)
	if r.code != cli.ExitOK || !sameRows(tableRows(r.out, o), want) {
		t.Fatalf("uninstall --release-claims: want rows %q\n%s", want, r)
	}
	o.check(t, map[client.Object][]string{
		o.pool: {foreignFinalizer}, o.managed: {foreignFinalizer}, o.extensions: {claims.Finalizer},
		o.addrClaim: {foreignFinalizer}, o.ourAddr: nil, o.otherAddr: {capi.ProtectFinalizer},
	})

	o.seed(t)
	r = runCLI(t, "uninstall", "-n", install, "--dry-run", "-o", "name")
	for _, name := range []string{"ippool.ipkeeper.io/" + o.pool.Name, "ipamclaim.k8s.cni.cncf.io/" + o.managed.Name, "ipaddress.ipam.cluster.x-k8s.io/" + o.ourAddr.Name} {
		if r.code != cli.ExitOK || !strings.Contains(r.out, name+"\n") {
			t.Errorf("uninstall --dry-run -o name: want %s\n%s", name, r)
		}
	}
	o.check(t, o.seeded)
}

func newUninstallObjects(t *testing.T) *uninstallObjects {
	ns := cp.NewNamespace(t, "cli-uninstall")
	o := &uninstallObjects{ns: ns}
	o.pool = cliPool(t, ns, ipkeeperv1alpha1.PoolRange{Range: "10.199.9.0/24"}, nil)
	o.managed = &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1.blue",
		Labels: map[string]string{claimowner.ManagedByLabel: claimowner.ManagedByValue}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "net1"}}
	o.extensions = &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm2.blue"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "net1"}}
	o.addrClaim = newClaim(ns, "machine-0", o.pool.Name)
	o.ourAddr = ipAddress(ns, "machine-0", capi.PoolGroup, "10.199.9.10")
	o.ourAddr.OwnerReferences = []metav1.OwnerReference{{APIVersion: ipkeeperv1alpha1.GroupVersion.String(), Kind: capi.PoolKind, Name: o.pool.Name, UID: o.pool.UID}}
	o.otherAddr = ipAddress(ns, "machine-1", "ipam.example.com", "10.199.9.11")
	for _, obj := range []client.Object{o.managed, o.extensions, o.addrClaim, o.ourAddr, o.otherAddr} {
		create(t, obj)
	}
	o.seeded = map[client.Object][]string{
		o.pool:       {ipkeeperv1alpha1.PoolInUseFinalizer, foreignFinalizer},
		o.managed:    {claims.Finalizer, claims.RetentionFinalizer, foreignFinalizer},
		o.extensions: {claims.Finalizer},
		o.addrClaim:  {capi.ReleaseFinalizer, foreignFinalizer},
		o.ourAddr:    {capi.ProtectFinalizer},
		o.otherAddr:  {capi.ProtectFinalizer},
	}
	o.poolRow = row("IPPool.ipkeeper.io", "<none>", o.pool.Name, ipkeeperv1alpha1.PoolInUseFinalizer)
	o.retainRow = row("IPAMClaim.k8s.cni.cncf.io", ns, o.managed.Name, claims.RetentionFinalizer)
	o.persistRow = row("IPAMClaim.k8s.cni.cncf.io", ns, o.managed.Name, claims.Finalizer)
	o.releaseRow = row("IPAddressClaim.ipam.cluster.x-k8s.io", ns, o.addrClaim.Name, capi.ReleaseFinalizer)
	o.protectRow = row("IPAddress.ipam.cluster.x-k8s.io", ns, o.ourAddr.Name, capi.ProtectFinalizer)
	t.Cleanup(func() { o.setFinalizers(t, func(client.Object) []string { return nil }) })
	o.seed(t)
	return o
}

func ipAddress(ns, name, poolGroup, ip string) *ipamv1.IPAddress {
	return &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ipamv1.IPAddressSpec{
		ClaimRef: ipamv1.IPAddressClaimReference{Name: name},
		PoolRef:  ipamv1.IPPoolReference{APIGroup: poolGroup, Kind: capi.PoolKind, Name: "pool"},
		Address:  ip, Prefix: ptr.To(int32(24)),
	}}
}

// seed gives every object its seeded finalizers.
func (o *uninstallObjects) seed(t *testing.T) {
	o.setFinalizers(t, func(obj client.Object) []string { return o.seeded[obj] })
}

func (o *uninstallObjects) setFinalizers(t *testing.T, finalizers func(client.Object) []string) {
	t.Helper()
	for obj := range o.seeded {
		cur := obj.DeepCopyObject().(client.Object)
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			t.Fatalf("reading %T %s: %v", obj, obj.GetName(), err)
		}
		cur.SetFinalizers(finalizers(obj))
		if err := cp.Client.Update(context.Background(), cur); err != nil {
			t.Fatalf("setting the finalizers of %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// check fails unless every object holds the finalizers want gives it.
func (o *uninstallObjects) check(t *testing.T, want map[client.Object][]string) {
	t.Helper()
	for obj, fs := range want {
		cur := obj.DeepCopyObject().(client.Object)
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			t.Fatalf("reading %T %s: %v", obj, obj.GetName(), err)
		}
		if got := cur.GetFinalizers(); !slices.Equal(got, fs) {
			t.Errorf("%T %s: finalizers %q, want %q", obj, obj.GetName(), got, fs)
		}
	}
}

// readyDeployment creates a controller Deployment in ns whose status (no
// deployment controller runs here) says one replica is ready.
func readyDeployment(t *testing.T, ns string) *appsv1.Deployment {
	labels := map[string]string{"app": naming.ControllerName}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: naming.ControllerName}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "ipkeeper:test"}}}},
	}}
	create(t, d)
	d.Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := cp.Client.Status().Update(context.Background(), d); err != nil {
		t.Fatalf("writing the status of Deployment %s/%s: %v", ns, d.Name, err)
	}
	return d
}

// freshLease creates the controller's leader Lease in ns, just renewed.
func freshLease(t *testing.T, ns string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: naming.ControllerName}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("ipkeeper-controller-0"), LeaseDurationSeconds: ptr.To(int32(15)),
		RenewTime: &metav1.MicroTime{Time: time.Now()},
	}}
	create(t, l)
	return l
}

func deleteObject(t *testing.T, obj client.Object) {
	if err := cp.Client.Delete(context.Background(), obj); err != nil {
		t.Fatalf("deleting %T %s: %v", obj, obj.GetName(), err)
	}
}

func row(kind, ns, name, finalizer string) string {
	return strings.Join([]string{kind, ns, name, finalizer}, " ")
}

// tableRows are the table's rows of the test's objects (the command is
// cluster-wide: other tests' objects may be listed too).
func tableRows(out string, o *uninstallObjects) []string {
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 4 && o.ours(f[1], f[2]) {
			rows = append(rows, row(f[0], f[1], f[2], f[3]))
		}
	}
	return rows
}

func jsonRows(t *testing.T, out string, o *uninstallObjects) []string {
	var removed []cli.RemovedFinalizer
	if err := json.Unmarshal([]byte(out), &removed); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	var rows []string
	for _, r := range removed {
		ns := r.Namespace
		if ns == "" {
			ns = "<none>"
		}
		if o.ours(ns, r.Name) {
			rows = append(rows, row(r.Kind+"."+r.Group, ns, r.Name, r.Finalizer))
		}
	}
	return rows
}

func (o *uninstallObjects) ours(ns, name string) bool {
	return ns == o.ns || (ns == "<none>" && name == o.pool.Name)
}

func sameRows(got, want []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}
