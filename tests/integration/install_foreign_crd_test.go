// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

const (
	ipamClaimCRDName = "ipamclaims.k8s.cni.cncf.io"
	nadCRDName       = "network-attachment-definitions.k8s.cni.cncf.io"
	// existingCRDsOverlay installs ipkeeper next to an IPAMClaim CRD
	// another component owns (docs/install.md).
	existingCRDsOverlay = "manifests/overlays/existing-crds"
	// ipkeeperManager is the field manager ipkeeper is installed with here.
	ipkeeperManager = "ipkeeper"
)

// foreignIPAMClaimCRD is the IPAMClaim CRD as another component ships it
// (tests/integration/testdata/foreign-crds, whose headers name the source).
type foreignIPAMClaimCRD struct {
	name  string // subtest name
	file  string // under testdata/foreign-crds
	owner string // the field manager it is applied with
	// keeps lists the status fields ipkeeper writes (ips, conditions,
	// ownerPod) that the CRD's schema keeps; the others are pruned.
	keeps []string
}

// TestInstallNextToForeignIPAMClaimCRD installs ipkeeper onto a cluster
// whose IPAMClaim CRD another component installed and owns (server-side
// apply under its own field manager), as on OpenShift (cluster network
// operator, with OVN-Kubernetes) and with CNAO, using the owners' own
// copies of the CRD. The existing-crds overlay installs without
// --force-conflicts and leaves the CRD to its owner; the default manifests
// conflict there (which is why the overlay exists); ipkeeper writes a
// claim's status against the owner's schema, and what that schema lacks is
// pruned, without a write loop; uninstalling with the overlay leaves the
// CRD and its claims in place. The NetworkAttachmentDefinition CRD is
// pre-applied by "multus" and never touched either.
//
// CRDs are cluster-wide, so each owner's case runs on a control plane of
// its own, started without the two foreign CRDs.
func TestInstallNextToForeignIPAMClaimCRD(t *testing.T) {
	// Rendering needs no cluster: the package's control plane's kubectl.
	defaultRendered := render(t, cp, repoPath(t, "manifests"))
	overlayRendered := render(t, cp, repoPath(t, existingCRDsOverlay))
	t.Run("the overlay is the default install without the IPAMClaim CRD", func(t *testing.T) {
		checkOverlayRender(t, defaultRendered, overlayRendered)
	})

	for _, f := range []foreignIPAMClaimCRD{
		// OpenShift's operator server-side applies its objects as
		// cluster-network-operator/<controller> (pkg/apply); CNAO updates
		// its own (Update operation), applied here as "cnao": a conflict
		// is the same with either kind of manager.
		{name: "openshift-cluster-network-operator", file: "ipamclaims.cluster-network-operator.yaml", owner: "cluster-network-operator/operconfig", keeps: []string{"conditions", "ips", "ownerPod"}},
		{name: "cnao", file: "ipamclaims.cnao.yaml", owner: "cnao", keeps: []string{"ips"}},
	} {
		t.Run(f.name, func(t *testing.T) {
			installNextToForeignCRD(t, f, len(renderedObjects(defaultRendered)), len(renderedObjects(overlayRendered)))
		})
	}
}

func installNextToForeignCRD(t *testing.T, f foreignIPAMClaimCRD, defaultObjects, overlayObjects int) {
	ctx := context.Background()
	own, err := framework.Start(ctx, framework.Options{
		SkipCRDs:              []string{"k8s.cni.cncf.io_ipamclaims.yaml", "k8s.cni.cncf.io_network-attachment-definitions.yaml"},
		WithoutKubeVirtCRDs:   true,
		WithoutClusterAPICRDs: true,
	})
	if err != nil {
		t.Fatalf("starting a control plane without the IPAMClaim and NAD CRDs: %v", err)
	}
	t.Cleanup(func() {
		if err := own.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	own.DumpLogsOnFailure(t)
	crds := crdClient(t, own)

	// The cluster's owners install their CRDs first: Multus the NAD CRD
	// (ipkeeper's copy is Multus' upstream one), f.owner the IPAMClaim CRD.
	nadBefore := applyForeignCRD(t, own, crds, repoPath(t, "manifests", "crds", "k8s.cni.cncf.io_network-attachment-definitions.yaml"), "multus", nadCRDName)
	before := applyForeignCRD(t, own, crds, filepath.Join("testdata", "foreign-crds", f.file), f.owner, ipamClaimCRDName)

	if !t.Run("the overlay installs without forcing", func(t *testing.T) {
		out, err := own.Kubectl(ctx, nil, "apply", "--server-side", "--field-manager="+ipkeeperManager, "-k", repoPath(t, existingCRDsOverlay))
		if err != nil {
			t.Fatalf("installing next to %s's IPAMClaim CRD: %v", f.owner, err)
		}
		if n := strings.Count(string(out), " serverside-applied"); n != overlayObjects {
			t.Errorf("%d of %d objects applied:\n%s", n, overlayObjects, out)
		}
		if strings.Contains(string(out), ipamClaimCRDName) || strings.Contains(string(out), nadCRDName) {
			t.Errorf("the overlay applied a foreign CRD:\n%s", out)
		}
		for _, name := range []string{"ipreservations.ipkeeper.io", "ippools.ipkeeper.io", "ipblocks.ipkeeper.io"} {
			if c := getCRD(t, crds, name); !crdEstablished(c) {
				t.Errorf("CRD %s installed but not established: %v", name, c.Status.Conditions)
			}
		}
	}) {
		return
	}

	t.Run("the IPAMClaim CRD is still its owner's alone", func(t *testing.T) {
		checkOwnedBy(t, getCRD(t, crds, ipamClaimCRDName), before, f.owner)
		checkOwnedBy(t, getCRD(t, crds, nadCRDName), nadBefore, "multus")
	})

	t.Run("the default manifests conflict with the owner", func(t *testing.T) {
		// A server-side dry run: the conflict check of a real apply,
		// without taking anything. ipkeeper-system exists by now, so
		// nothing but the conflict can fail.
		out, err := own.Kubectl(ctx, nil, "apply", "--server-side", "--dry-run=server", "--field-manager="+ipkeeperManager, "-k", repoPath(t, "manifests"))
		if err == nil {
			t.Fatalf("the default manifests applied without a conflict next to %s's CRD:\n%s", f.owner, out)
		}
		// "Apply failed with 1 conflict: conflict with "owner": .spec.versions",
		// or "... 2 conflicts: conflicts with "owner":" and a list.
		want := fmt.Sprintf(" with %q", f.owner)
		if !strings.Contains(string(out), "Apply failed with") || !strings.Contains(string(out), want) || !strings.Contains(string(out), ".spec.versions") {
			t.Errorf("the error does not name the owner (%s) and .spec.versions:\n%s", want, out)
		}
		if n := strings.Count(string(out), "serverside-applied (server dry run)"); n != defaultObjects-1 {
			t.Errorf("%d of %d objects applied, want all but the IPAMClaim CRD:\n%s", n, defaultObjects, out)
		}
		if strings.Contains(string(out), "customresourcedefinition.apiextensions.k8s.io/"+ipamClaimCRDName+" serverside-applied") {
			t.Errorf("the IPAMClaim CRD was applied:\n%s", out)
		}
		checkOwnedBy(t, getCRD(t, crds, ipamClaimCRDName), before, f.owner)
	})

	ns := own.NewNamespace(t, "claims")
	t.Run("ipkeeper-controller writes a claim's status against the owner's schema", func(t *testing.T) {
		checkClaimStatusWrites(t, own, ns, f)
	})

	t.Run("uninstalling with the overlay keeps the owner's CRD", func(t *testing.T) {
		// --wait=false: kubectl would also wait for kube-controller-manager
		// to empty the namespace, which this test is not about (kubectl's
		// wait once ran past two minutes here). What the uninstall must do
		// is polled below.
		out, err := own.Kubectl(ctx, nil, "delete", "-k", repoPath(t, existingCRDsOverlay), "--wait=false")
		if err != nil {
			t.Fatalf("uninstalling: %v", err)
		}
		if strings.Contains(string(out), ipamClaimCRDName) || strings.Contains(string(out), nadCRDName) {
			t.Errorf("the uninstall deleted a foreign CRD:\n%s", out)
		}
		// The uninstall did run: ipkeeper's own CRDs go, its namespace is
		// terminating or gone.
		if err := framework.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			for _, name := range []string{"ipreservations.ipkeeper.io", "ippools.ipkeeper.io", "ipblocks.ipkeeper.io"} {
				switch err := crds.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); {
				case err == nil:
					return false, fmt.Errorf("CRD %s still exists", name)
				case !apierrors.IsNotFound(err):
					return false, fmt.Errorf("CRD %s: %w", name, err)
				}
			}
			switch sys, err := own.Clientset.CoreV1().Namespaces().Get(ctx, installNS, metav1.GetOptions{}); {
			case apierrors.IsNotFound(err):
				return true, nil
			case err != nil:
				return false, err
			case sys.DeletionTimestamp == nil:
				return false, fmt.Errorf("namespace %s not being deleted", installNS)
			}
			return true, nil
		}); err != nil {
			t.Fatalf("ipkeeper not uninstalled: %v", err)
		}
		after := getCRD(t, crds, ipamClaimCRDName)
		if after.UID != before.UID || after.DeletionTimestamp != nil {
			t.Fatalf("the IPAMClaim CRD was deleted or replaced: uid %s -> %s, deletionTimestamp %v", before.UID, after.UID, after.DeletionTimestamp)
		}
		checkOwnedBy(t, after, before, f.owner)
		if nad := getCRD(t, crds, nadCRDName); nad.UID != nadBefore.UID || nad.DeletionTimestamp != nil {
			t.Errorf("the NAD CRD was deleted or replaced")
		}
		var claims ipamclaimsv1alpha1.IPAMClaimList
		if err := own.Client.List(ctx, &claims, client.InNamespace(ns)); err != nil || len(claims.Items) != 1 {
			t.Errorf("claims after the uninstall: %d (%v), want the one made before it", len(claims.Items), err)
		}
	})
}

// checkOverlayRender: the overlay renders exactly the default's objects but
// the IPAMClaim CRD, and composes with the cert-manager overlay as
// manifests/components/existing-crds says.
func checkOverlayRender(t *testing.T, defaultRendered, overlayRendered []byte) {
	def, over := renderedObjects(defaultRendered), renderedObjects(overlayRendered)
	var dropped []string
	for _, o := range def {
		if !slices.Contains(over, o) {
			dropped = append(dropped, o)
		}
	}
	if want := []string{"CustomResourceDefinition/" + ipamClaimCRDName}; !slices.Equal(dropped, want) || len(over) != len(def)-1 {
		t.Errorf("the overlay leaves out %v of the default's %d objects (renders %d), want only %v", dropped, len(def), len(over), want)
	}
	for _, o := range over {
		if strings.HasPrefix(o, "CustomResourceDefinition/") && strings.HasSuffix(o, ".k8s.cni.cncf.io") {
			t.Errorf("the overlay installs %s", o)
		}
	}
	if !slices.Contains(over, "Deployment/ipkeeper-controller") || !slices.Contains(over, "CustomResourceDefinition/ipreservations.ipkeeper.io") {
		t.Errorf("the overlay lacks ipkeeper's own objects: %v", over)
	}

	dir := t.TempDir()
	rel, err := filepath.Rel(dir, repoPath(t))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("resources: [%s]\ncomponents: [%s]\n",
		filepath.Join(rel, "manifests", "overlays", "cert-manager"), filepath.Join(rel, "manifests", "components", "existing-crds"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	certManager := renderedObjects(render(t, cp, repoPath(t, "manifests", "overlays", "cert-manager")))
	combined := renderedObjects(render(t, cp, dir))
	if slices.Contains(combined, "CustomResourceDefinition/"+ipamClaimCRDName) || !slices.Contains(combined, "Certificate/ipkeeper-webhook") || len(combined) != len(certManager)-1 {
		t.Errorf("cert-manager overlay with the existing-crds component renders %v, want the cert-manager overlay's %d objects but the IPAMClaim CRD", combined, len(certManager))
	}
}

// checkClaimStatusWrites writes a claim's status as ipkeeper-controller
// does (internal/controller/claimaddrs/record.go: one status update with ips, the
// IPsAllocated condition and ownerPod), with the controller's own
// ServiceAccount, RBAC and admission policy from the overlay, and reads
// back what the owner's schema keeps.
func checkClaimStatusWrites(t *testing.T, own *framework.ControlPlane, ns string, f foreignIPAMClaimCRD) {
	ctx := context.Background()
	user, groups := framework.ServiceAccountUser(installNS, "ipkeeper-controller")
	ctrl, err := client.New(own.As(user, groups...).Config, client.Options{Scheme: own.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1.blue"},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue-net", Interface: "podc0ffee0123"},
	}
	// The overlay's RBAC was just applied: the authorizer's cache may lag.
	if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := ctrl.Create(ctx, claim)
		return err == nil, err
	}); err != nil {
		t.Fatalf("ipkeeper-controller creating a claim: %v", err)
	}

	ips := []string{"10.200.0.5/24", "fd00:200::5/64"}
	claim.Status.IPs = slices.Clone(ips)
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionTrue, Reason: claimstatus.ReasonAllocated,
		ObservedGeneration: claim.Generation, Message: strings.Join(ips, ", ") + ` allocated on network "blue-net"`,
	})
	claim.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-vm1-abcde"}
	written := claim.DeepCopy()
	if err := ctrl.Status().Update(ctx, claim); err != nil {
		t.Fatalf("ipkeeper-controller writing the claim's status: %v", err)
	}

	// What survives, read raw: a pruned field is simply absent.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ipamclaimsv1alpha1.SchemeGroupVersion.WithKind("IPAMClaim"))
	if err := own.Client.Get(ctx, client.ObjectKeyFromObject(claim), u); err != nil {
		t.Fatal(err)
	}
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	var kept []string
	for k := range status {
		kept = append(kept, k)
	}
	slices.Sort(kept)
	if !slices.Equal(kept, f.keeps) {
		t.Errorf("status fields kept by %s's CRD: %v, want %v (status %v)", f.owner, kept, f.keeps, status)
	}
	var got ipamclaimsv1alpha1.IPAMClaim
	if err := own.Client.Get(ctx, client.ObjectKeyFromObject(claim), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Status.IPs, ips) {
		t.Errorf("status.ips read back %v, want %v", got.Status.IPs, ips)
	}
	if slices.Contains(f.keeps, "conditions") != meta.IsStatusConditionTrue(got.Status.Conditions, claimstatus.ConditionIPsAllocated) {
		t.Errorf("conditions read back %v; kept by the schema: %v", got.Status.Conditions, slices.Contains(f.keeps, "conditions"))
	}
	if slices.Contains(f.keeps, "ownerPod") != (got.Status.OwnerPod != nil && got.Status.OwnerPod.Name == written.Status.OwnerPod.Name) {
		t.Errorf("ownerPod read back %v; kept by the schema: %v", got.Status.OwnerPod, slices.Contains(f.keeps, "ownerPod"))
	}
	t.Logf("%s's CRD keeps status %v of ipkeeper's ips, conditions and ownerPod", f.owner, kept)

	// The controller sees the pruned fields missing and writes them again
	// on its next look: the API server must take that as a no-op (no new
	// resourceVersion, so no watch event and no write loop).
	again := got.DeepCopy()
	again.Status = *written.Status.DeepCopy()
	if err := ctrl.Status().Update(ctx, again); err != nil {
		t.Fatalf("writing the same status again: %v", err)
	}
	if again.ResourceVersion != got.ResourceVersion {
		t.Errorf("writing the same status again made resourceVersion %s (was %s): a write loop on this schema", again.ResourceVersion, got.ResourceVersion)
	}

	// ipkeeper's claim-status admission policy holds on this schema too:
	// the controller never changes addresses a claim has. The policy was
	// just applied; until the API server enforces it, a change goes through.
	const refusal = "may set an IPAMClaim's addresses only while it has"
	var lastErr error
	try := 0
	if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var c ipamclaimsv1alpha1.IPAMClaim
		if err := ctrl.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
			return false, err
		}
		try++
		c.Status.IPs = []string{fmt.Sprintf("10.200.%d.%d/24", 1+try/250, 1+try%250), "fd00:200::6/64"}
		lastErr = ctrl.Status().Update(ctx, &c)
		return apierrors.IsForbidden(lastErr) || apierrors.IsInvalid(lastErr), nil
	}); err != nil || !strings.Contains(fmt.Sprint(lastErr), refusal) {
		t.Errorf("ipkeeper-controller changing a claim's addresses: %v (%v), want the policy's refusal %q", lastErr, err, refusal)
	}
}

// applyForeignCRD applies a CRD with server-side apply as owner (another
// component's install), waits until it is established and returns it.
func applyForeignCRD(t *testing.T, own *framework.ControlPlane, crds client.Client, file, owner, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := context.Background()
	if out, err := own.Kubectl(ctx, nil, "apply", "--server-side", "--field-manager="+owner, "-f", file); err != nil {
		t.Fatalf("applying %s as %s: %v\n%s", file, owner, err, out)
	}
	var crd *apiextensionsv1.CustomResourceDefinition
	if err := framework.Eventually(ctx, 60*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		crd = &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, err
		}
		return crdEstablished(crd), nil
	}); err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
	checkOwnedBy(t, crd, crd, owner)
	return crd
}

// checkOwnedBy: the CRD's spec is unchanged since before, owner is the one
// manager of anything in its spec, and ipkeeper manages nothing in it.
func checkOwnedBy(t *testing.T, crd, before *apiextensionsv1.CustomResourceDefinition, owner string) {
	t.Helper()
	if crd.Generation != before.Generation || !equality.Semantic.DeepEqual(crd.Spec, before.Spec) {
		t.Errorf("CRD %s changed: generation %d -> %d", crd.Name, before.Generation, crd.Generation)
	}
	ownsSpec := false
	for _, mf := range crd.ManagedFields {
		var fields map[string]json.RawMessage
		if mf.FieldsV1 != nil {
			if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
				t.Fatalf("managedFields of %s: %v", crd.Name, err)
			}
		}
		_, spec := fields["f:spec"]
		switch {
		case mf.Manager == ipkeeperManager:
			t.Errorf("CRD %s: ipkeeper manages %s", crd.Name, mf.FieldsV1.Raw)
		case spec && mf.Manager != owner:
			t.Errorf("CRD %s: %s (%s) manages part of its spec, want only %s", crd.Name, mf.Manager, mf.Operation, owner)
		case spec && mf.Operation == metav1.ManagedFieldsOperationApply:
			ownsSpec = true
		}
	}
	if !ownsSpec {
		t.Errorf("CRD %s: %s does not apply its spec; managed fields: %v", crd.Name, owner, managers(crd))
	}
}

func managers(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var m []string
	for _, mf := range crd.ManagedFields {
		m = append(m, mf.Manager+"/"+string(mf.Operation)+"/"+mf.Subresource)
	}
	return m
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func getCRD(t *testing.T, crds client.Client, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := crds.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("reading CRD %s: %v", name, err)
	}
	return crd
}

// crdClient reads CustomResourceDefinitions (not in ipkeeper's scheme).
func crdClient(t *testing.T, own *framework.ControlPlane) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(own.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func render(t *testing.T, own *framework.ControlPlane, dir string) []byte {
	t.Helper()
	out, err := own.Kubectl(context.Background(), nil, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderedObjects lists a rendering's objects as kind/name, in order.
func renderedObjects(rendered []byte) []string {
	var objs []string
	for _, doc := range strings.Split("\n"+string(rendered), "\n---\n") {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if strings.TrimSpace(doc) == "" {
			continue
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil || o.Kind == "" {
			objs = append(objs, "unparsable")
			continue
		}
		objs = append(objs, o.Kind+"/"+o.Metadata.Name)
	}
	return objs
}
