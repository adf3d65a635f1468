// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// The live pass before a claim's finalizer comes off must see a launcher
// pod the cache has not seen yet, also when the VM sets spec.hostname:
// KubeVirt then labels the launcher vm.kubevirt.io/name with the hostname,
// not the VMI's name, and only kubevirt.io/created-by (the VMI's UID) finds it.
func TestUsersLivePassFindsLaunchersByVMIUID(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.blue"}}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1", UID: "vmi-uid"}}
	launcher := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "vms", Name: "virt-launcher-vm1-abcde", Labels: labels,
			Annotations: map[string]string{multus.Annotation: `[{"name":"blue","namespace":"vms","ipam-claim-reference":"vm1.blue"}]`},
		}}
	}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "vm-uid"}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"hostname set", map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "custom-host", kubevirtv1.CreatedByLabel: "vmi-uid"}, true},
		{"no hostname", map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm1", kubevirtv1.CreatedByLabel: "vmi-uid"}, true},
		{"another VMI's launcher", map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm2", kubevirtv1.CreatedByLabel: "other-uid"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The cache has not seen the launcher yet; the API server has.
			cache := fake.NewClientBuilder().WithScheme(scheme).
				WithIndex(podrefs.Metadata(), podrefs.IndexClaim, podrefs.Claims).Build()
			api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi, launcher(tt.labels)).Build()
			r := &ClaimReleaser{Client: cache, APIReader: api}
			who, err := r.users(context.Background(), api, claim, owner, ownerGone)
			if err != nil {
				t.Fatalf("users: %v", err)
			}
			if got := who == "pod virt-launcher-vm1-abcde"; got != tt.want {
				t.Fatalf("users() = %q; want the launcher pod found: %v", who, tt.want)
			}
		})
	}
}

// A launcher pod whose containers ended for good (phase Succeeded: the
// source of a live migration after the hand-over; Failed: the target of a
// failed one) holds no address any more, though KubeVirt keeps it until its
// VMI goes: it does not keep a claim the VM no longer wants (a network
// unplugged after a migration), in the cached pass or the live one. A pod
// still running or starting does.
func TestUsersSkipEndedLaunchers(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.green"}}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1", UID: "vmi-uid"}}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "vm-uid"}
	for _, tt := range []struct {
		phase corev1.PodPhase
		user  bool
	}{
		{corev1.PodSucceeded, false},
		{corev1.PodFailed, false},
		{corev1.PodRunning, true},
		{corev1.PodPending, true},
	} {
		t.Run(string(tt.phase), func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "vms", Name: "virt-launcher-vm1-abcde", UID: "pod-uid",
					Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm1", kubevirtv1.CreatedByLabel: "vmi-uid"},
					Annotations: map[string]string{multus.Annotation: `[{"name":"green","namespace":"vms","ipam-claim-reference":"vm1.green"}]`},
				},
				Status: corev1.PodStatus{Phase: tt.phase},
			}
			cache := fake.NewClientBuilder().WithScheme(scheme).WithIndex(podrefs.Metadata(), podrefs.IndexClaim, podrefs.Claims).WithObjects(pod.DeepCopy()).Build()
			api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi, pod.DeepCopy()).Build()
			r := &ClaimReleaser{Client: cache, APIReader: api}
			for _, pass := range []struct {
				name   string
				reader client.Reader
			}{{"cached", cache}, {"live", api}} {
				who, err := r.users(context.Background(), pass.reader, claim, owner, ownerLive)
				if err != nil {
					t.Fatalf("%s pass: %v", pass.name, err)
				}
				if got := who != ""; got != tt.user {
					t.Errorf("%s pass: users() = %q for a %s launcher; want it counted as a user: %v", pass.name, who, tt.phase, tt.user)
				}
			}
		})
	}
}

// While another controller makes claims its webhook rewrites a running
// launcher's references (ipam-extensions points every persistent network
// at <vm>.<network>, on any update): the claim a running interface holds,
// for example one of a NAD swap ipkeeper made before, is then kept by any
// running launcher of its owner, not only by one that references it.
func TestUsersWhileAnotherControllerRewritesReferences(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	swapped := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.blue.net-b.0123"}}
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "virt-launcher-vm1-abcde",
		Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm1", kubevirtv1.CreatedByLabel: "vmi-uid"},
		Annotations: map[string]string{kubevirtv1.DomainAnnotation: "vm1", multus.Annotation: `[{"name":"blue-b","namespace":"vms","ipam-claim-reference":"vm1.blue"}]`},
	}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "vm-uid"}
	for _, tt := range []struct {
		maker Maker
		want  string
	}{
		{fakeMaker{external: true}, "pod virt-launcher-vm1-abcde"},
		{fakeMaker{external: false}, ""},
		{nil, ""},
	} {
		cache := fake.NewClientBuilder().WithScheme(scheme).
			WithIndex(podrefs.Metadata(), podrefs.IndexClaim, podrefs.Claims).Build()
		api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(launcher.DeepCopy()).Build()
		r := &ClaimReleaser{Client: cache, APIReader: api, Maker: tt.maker}
		who, err := r.users(context.Background(), api, swapped, owner, ownerGone)
		if err != nil {
			t.Fatalf("users: %v", err)
		}
		if who != tt.want {
			t.Errorf("maker %v: users() = %q, want %q", tt.maker, who, tt.want)
		}
	}
}

// Whoever makes claims, a running launcher of the owner whose
// network-status lists an address of the claim keeps it: its interface is
// attached with that address, whatever its references say now (another
// controller's webhook may have rewritten them before it went).
func TestUsersCountsAnAttachedAddress(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme, nadv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	swapped := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.blue.net-b.0123"},
		Spec:   ipamclaimsv1alpha1.IPAMClaimSpec{Network: "net-b"},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.64.1.37/26"}}}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "vm-uid"}
	nad := func(name, network string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"` + network + `","type":"bridge","ipam":{"type":"ipkeeper","range":"10.64.1.0/26"}}`}}
	}
	for _, tt := range []struct {
		status string
		want   string
	}{
		{`[{"name":"vms/blue-b","interface":"pod16477688c0e","ips":["10.64.1.37"]}]`, "pod virt-launcher-vm1-abcde"},
		// The same address on another network (a NAD of it) is not the claim's.
		{`[{"name":"vms/blue-a","interface":"pod16477688c0e","ips":["10.64.1.37"]}]`, ""},
		{`[{"name":"vms/blue-b","interface":"pod16477688c0e","ips":["10.64.1.38"]}]`, ""},
		{``, ""},
	} {
		launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "virt-launcher-vm1-abcde",
			Labels: map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm1", kubevirtv1.CreatedByLabel: "vmi-uid"},
			Annotations: map[string]string{kubevirtv1.DomainAnnotation: "vm1",
				multus.Annotation:                   `[{"name":"blue-b","namespace":"vms","ipam-claim-reference":"vm1.blue"}]`,
				"k8s.v1.cni.cncf.io/network-status": tt.status},
		}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nad("blue-a", "net-a"), nad("blue-b", "net-b")).
			WithIndex(podrefs.Metadata(), podrefs.IndexClaim, podrefs.Claims).Build()
		api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(launcher).Build()
		r := &ClaimReleaser{Client: cache, APIReader: api}
		who, err := r.users(context.Background(), api, swapped, owner, ownerGone)
		if err != nil {
			t.Fatalf("users: %v", err)
		}
		if who != tt.want {
			t.Errorf("network-status %s: users() = %q, want %q", tt.status, who, tt.want)
		}
	}
}

// While its owner is there, a launcher of the owner whose interfaces Multus
// has not reported yet keeps the owner's claims, and the claim is judged
// again shortly: its ADDs may be taking a claim's addresses at that moment
// whatever its references say (the chaos checker saw a VM swapped away and
// back lose the claim its new launcher was attaching with).
func TestUsersCountsALauncherBeingAttached(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.blue"},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.64.0.37/26"}}}
	owner := claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "vm-uid"}
	for _, tt := range []struct {
		name   string
		status string
		state  ownerState
		want   string
	}{
		{"not reported, owner there", "", ownerLive, "pod virt-launcher-vm1-abcde" + attaching},
		{"not reported, owner gone", "", ownerGone, ""},
		{"reported without the claim's address", `[{"name":"vms/blue-b","interface":"pod16477688c0e","ips":["10.64.1.38"]}]`, ownerLive, ""},
	} {
		annotations := map[string]string{kubevirtv1.DomainAnnotation: "vm1",
			multus.Annotation: `[{"name":"blue-b","namespace":"vms","ipam-claim-reference":"vm1.blue.net-b.0123"}]`}
		if tt.status != "" {
			annotations["k8s.v1.cni.cncf.io/network-status"] = tt.status
		}
		launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "virt-launcher-vm1-abcde",
			Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue, kubevirt.VMINameLabel: "vm1", kubevirtv1.CreatedByLabel: "vmi-uid"},
			Annotations: annotations,
		}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
		cache := fake.NewClientBuilder().WithScheme(scheme).
			WithIndex(podrefs.Metadata(), podrefs.IndexClaim, podrefs.Claims).Build()
		api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(launcher).Build()
		r := &ClaimReleaser{Client: cache, APIReader: api}
		who, err := r.users(context.Background(), api, claim, owner, tt.state)
		if err != nil {
			t.Fatalf("%s: users: %v", tt.name, err)
		}
		if who != tt.want {
			t.Errorf("%s: users() = %q, want %q", tt.name, who, tt.want)
		}
	}
}
