// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// liveReader is the API reader of the tests: the same objects as the
// cache, read through a value that is not the cache (users' live pass).
type liveReader struct{ client.Reader }

// A claim the VM no longer wants (its network swapped to a NAD of another
// CNI network) and that nothing uses is deleted; but a launcher pod may be
// created between the release's live reads and the delete (the user swaps
// back, and the target of the migration references the claim, which still
// exists), and attach with the claim's addresses before the delete lands.
// So the finalizer comes off only in a later pass, whose live reads, made
// after the delete, find that launcher: the claim, and so its addresses,
// stay until it ends. An ADD after the delete finds the claim being deleted
// and waits for it made again.
func TestReleaseLooksForUsersAgainAfterDeleting(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme, nadv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "vms"
	nad := func(name, network string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"` + network + `","type":"bridge","ipam":{"type":"ipkeeper"}}`}}
	}
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1", UID: "vm-uid"},
		Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Networks: []kubevirtv1.Network{{Name: "blue", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "blue-b"}}}},
		}}},
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1", UID: "vmi-uid",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}}}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "vm-uid"}
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1.blue", UID: "claim-uid", Finalizers: []string{Finalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
			Annotations:     map[string]string{NetworkAnnotation: "blue"}},
		Spec:   ipamclaimsv1alpha1.IPAMClaimSpec{Network: "net-a", Interface: kubevirt.PodInterfaceName("blue")},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.0.0.40/24"}},
	}
	claimowner.Record(claim, owner)
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(nad("blue-a", "net-a"), nad("blue-b", "net-b"), vm, vmi, claim).
		WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithIndex(podrefs.Metadata(), podrefs.IndexClaim, podrefs.Claims).Build()
	r := &ClaimReleaser{Client: c, APIReader: liveReader{c}, Recorder: record.NewFakeRecorder(100)}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: claim.Name}}
	read := func() (*ipamclaimsv1alpha1.IPAMClaim, bool) {
		t.Helper()
		var got ipamclaimsv1alpha1.IPAMClaim
		err := c.Get(ctx, req.NamespacedName, &got)
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return &got, true
	}

	// Nothing uses the claim and the VM's network names another CNI
	// network: the claim is deleted, its finalizer kept for now.
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	got, ok := read()
	if !ok {
		t.Fatal("the first pass removed the claim outright: a launcher that attached with it between the pass's reads and its delete would run on an address nobody holds")
	}
	if got.DeletionTimestamp == nil || !controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Fatalf("after the first pass: deletionTimestamp %v, finalizers %v; want deleted, finalizer kept", got.DeletionTimestamp, got.Finalizers)
	}

	// Meanwhile a launcher of the VM started with the claim (the user
	// swapped back; the migration target references it) and Multus
	// reported its interface with the claim's address.
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: "virt-launcher-vm1-target",
		Labels:          map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm1", kubevirtv1.CreatedByLabel: "vmi-uid"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, kubevirtv1.VirtualMachineInstanceGroupVersionKind)},
		Annotations: map[string]string{
			multus.Annotation:        `[{"name":"blue-a","namespace":"vms","interface":"` + kubevirt.PodInterfaceName("blue") + `","ipam-claim-reference":"vm1.blue"}]`,
			nadv1.NetworkStatusAnnot: `[{"name":"vms/blue-a","interface":"` + kubevirt.PodInterfaceName("blue") + `","ips":["10.0.0.40"]}]`,
		},
	}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := c.Create(ctx, launcher); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if _, ok := read(); !ok {
		t.Fatal("the claim went while a running launcher holds its address")
	}

	// The launcher ends: now the claim goes.
	launcher.Status.Phase = corev1.PodSucceeded
	if err := c.Status().Update(ctx, launcher); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("third pass: %v", err)
	}
	if got, ok := read(); ok {
		t.Fatalf("the claim stays after its last launcher ended: deletionTimestamp %v, finalizers %v", got.DeletionTimestamp, got.Finalizers)
	}
}
