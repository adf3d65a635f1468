// SPDX-License-Identifier: Apache-2.0

package install

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// helmRelease is the release the chart is installed as, into
// helmNamespace: a namespace that exists before the install (as an
// administrator makes and labels it) and is not the kustomize install's
// ipkeeper-system.
const (
	helmRelease   = "ipkeeper"
	helmNamespace = "ipk-helm"
)

// TestHelmInstallUpgradeUninstall installs the chart of the checkout
// (charts/ipkeeper) with helm onto the control plane, into an existing
// namespace other than ipkeeper-system, upgrades it to the
// OpenShift values and uninstalls it. After the install and after the
// upgrade, the Deployment and DaemonSet Helm installed run as processes,
// with their own commands and their ServiceAccounts' credentials
// (framework.RunInstalled), and serve an ADD and a DEL. The upgrade must
// add what the new values add and delete what they drop; the uninstall
// must delete every object of the chart but the CRDs, which Helm, finding
// them installed, neither changed nor deletes.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := framework.ChartDir(root)
	bins, err := framework.BuildBinaries(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) string {
		t.Helper()
		out, err := framework.Helm(ctx, cp.Tools, cp.KubeconfigPath, append(args, "--namespace", helmNamespace)...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}

	// The control plane installed every CRD of manifests/crds, as another
	// component (or an earlier install) would have: Helm must leave them
	// as they are.
	crdsBefore := crdVersions(t, root)

	// The namespace exists, labelled as docs/helm.md says; registered
	// first, so that it is deleted after the release (cleanups run last
	// first).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if err := cp.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Client.Delete(context.Background(), ns); err != nil {
			t.Error(err)
		}
		if err := framework.WaitGone(context.Background(), cp.Client, ns, 3*time.Minute); err != nil {
			t.Error(err)
		}
	})
	uninstalled := false
	t.Cleanup(func() {
		if uninstalled {
			return
		}
		if _, err := framework.Helm(context.Background(), cp.Tools, cp.KubeconfigPath, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "3m"); err != nil {
			t.Error(err)
		}
	})
	helm("install", helmRelease, chart, "--set", "networkPolicy.enabled=true", "--set", "logLevel=debug", "--set", "agent.podAnnotations.example\\.org/team=net")
	if got := releaseRevision(t, helm); got != 1 {
		t.Fatalf("after helm install the release is at revision %d", got)
	}
	// Nothing went into the kustomize install's namespace, or made one.
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: releaseNamespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("the chart installed into %s made namespace %s (%v)", helmNamespace, releaseNamespace, err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "ipkeeper-controller"}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Errorf("networkPolicy.enabled=true: %v", err)
	}
	var installedAgent appsv1.DaemonSet
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "ipkeeper-agent"}, &installedAgent); err != nil {
		t.Fatal(err)
	}
	if got := installedAgent.Spec.Template.Annotations["example.org/team"]; got != "net" {
		t.Errorf("the agent's pod annotations %v lack example.org/team=net", installedAgent.Spec.Template.Annotations)
	}
	t.Run("installed", func(t *testing.T) {
		// RunInstalled runs the installed command lines: --log-level=debug
		// must be a flag both binaries take.
		serveAnAddIn(t, bins, helmNamespace, "helm-node", "10.124.1.0/24")
	})
	unrouteWebhook(t)

	helm("upgrade", helmRelease, chart, "-f", filepath.Join(chart, "values-openshift.yaml"))
	if got := releaseRevision(t, helm); got != 2 {
		t.Fatalf("after helm upgrade the release is at revision %d", got)
	}
	// What the new values drop is deleted, what they add is there.
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "ipkeeper-controller"}, &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("the upgrade without networkPolicy.enabled left the NetworkPolicy (%v)", err)
	}
	for _, name := range []string{"ipkeeper-agent-scc", "ipkeeper-controller-scc"} {
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: name}, &rbacv1.RoleBinding{}); err != nil {
			t.Errorf("the OpenShift values' RoleBinding %s: %v", name, err)
		}
	}
	var deploy appsv1.Deployment
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "ipkeeper-controller"}, &deploy); err != nil {
		t.Fatal(err)
	}
	args := deploy.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--webhook-cert-mode=provided", "--webhook-cert-dir=/certs", "--require-kubevirt-feature-gate=false"} {
		if !slices.Contains(args, want) {
			t.Errorf("the upgraded controller's args %v lack %s", args, want)
		}
	}
	var ds appsv1.DaemonSet
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: helmNamespace, Name: "ipkeeper-agent"}, &ds); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "cni-bin" && v.HostPath != nil && v.HostPath.Path == "/var/lib/cni/bin"
	}) {
		t.Errorf("the upgraded agent's volumes %+v: want cni-bin on /var/lib/cni/bin", ds.Spec.Template.Spec.Volumes)
	}
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: "ipkeeper"}, &whc); err != nil {
		t.Fatal(err)
	}
	if whc.Annotations["service.beta.openshift.io/inject-cabundle"] != "true" {
		t.Errorf("the upgraded webhook configuration's annotations %v", whc.Annotations)
	}
	t.Run("upgraded", func(t *testing.T) {
		// Provided certificates now: RunInstalled mounts a test CA's, as
		// OpenShift's service CA would.
		serveAnAddIn(t, bins, helmNamespace, "helm-node-upgraded", "10.124.2.0/24")
	})

	helm("uninstall", helmRelease, "--wait", "--timeout", "3m")
	uninstalled = true
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: helmNamespace, Name: "ipkeeper-controller"}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: helmNamespace, Name: "ipkeeper-agent"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: helmNamespace, Name: "ipkeeper-controller"}},
	} {
		if err := framework.WaitGone(ctx, cp.Client, obj, time.Minute); err != nil {
			t.Errorf("after helm uninstall: %v", err)
		}
	}
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-agent"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-controller"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-agent"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-controller"}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper"}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-agent-node-bound"}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-launcher-identity"}},
	} {
		if err := framework.WaitGone(ctx, cp.Client, obj, 30*time.Second); err != nil {
			t.Errorf("after helm uninstall: %v", err)
		}
	}
	if after := crdVersions(t, root); !maps.Equal(after, crdsBefore) {
		t.Errorf("the CRDs (name: resourceVersion) were %v before the install and are %v after the uninstall: Helm must not change or delete CRDs it found", crdsBefore, after)
	}
}

// crdVersions maps each CRD the chart ships (its crds/ directory) to its
// resourceVersion on the control plane.
func crdVersions(t *testing.T, root string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(framework.ChartDir(root), "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the chart's CRDs: %v (%d files)", err, len(files))
	}
	versions := map[string]string{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		group, plural, _ := strings.Cut(name, "_")
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		if err := cp.Client.Get(context.Background(), client.ObjectKey{Name: plural + "." + group}, crd); err != nil {
			t.Fatalf("CRD of %s: %v", filepath.Base(f), err)
		}
		versions[crd.GetName()] = crd.GetResourceVersion()
	}
	return versions
}

// releaseRevision is the revision `helm status` reports.
func releaseRevision(t *testing.T, helm func(args ...string) string) int {
	t.Helper()
	var status struct {
		Version int                     `json:"version"`
		Info    struct{ Status string } `json:"info"`
	}
	if err := json.Unmarshal([]byte(helm("status", helmRelease, "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if status.Info.Status != "deployed" {
		t.Errorf("release %s is %q, want deployed", helmRelease, status.Info.Status)
	}
	return status.Version
}

// unrouteWebhook points the webhook configuration back at the Service, as
// the chart installed it: RunInstalled pointed it at the controller
// process by URL, and an upgrade that patches the Service reference back
// in would leave both, which the API server refuses.
func unrouteWebhook(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var whc admissionregistrationv1.MutatingWebhookConfiguration
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: "ipkeeper"}, &whc); err != nil {
			return err
		}
		for i := range whc.Webhooks {
			cc := &whc.Webhooks[i].ClientConfig
			if cc.URL == nil {
				continue
			}
			u, err := url.Parse(*cc.URL)
			if err != nil {
				return err
			}
			cc.URL = nil
			cc.Service = &admissionregistrationv1.ServiceReference{Namespace: helmNamespace, Name: "ipkeeper-webhook", Path: ptr.To(u.Path), Port: ptr.To[int32](443)}
		}
		return cp.Client.Update(ctx, &whc)
	})
	if err != nil {
		t.Fatalf("pointing the webhook configuration back at its Service: %v", err)
	}
}
