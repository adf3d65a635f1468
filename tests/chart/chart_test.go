// SPDX-License-Identifier: Apache-2.0

// Package chart checks the Helm chart charts/ipkeeper against the kustomize
// install it packages: rendered with its default values it must give the
// objects `kubectl kustomize manifests/` gives, with cert-manager
// certificates those of manifests/overlays/cert-manager, with
// values-openshift.yaml those of manifests/overlays/openshift; every value
// renders what docs/helm.md says, and the flags it renders exist in the
// binaries. The pinned helm and kubectl render; no API server runs here
// (tests/install installs the chart on one).
package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// release and namespace are what the chart is rendered as (the
// kustomize tree's namespace); kubeVersion is the Kubernetes helm renders
// for: the pinned helm, built without Kubernetes' version, would assume
// 1.20, below the chart's kubeVersion.
const (
	release     = "ipkeeper"
	namespace   = "ipkeeper-system"
	kubeVersion = "v1.34.2"
)

// helmLabels are the labels Helm's conventions add to the chart's objects
// (and app.kubernetes.io/version, which follows the chart): the kustomize
// install has none of them.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// clusterScoped are the kinds ipkeeper installs that have no namespace.
// kustomize's namespace transformer sets one on kinds it does not know
// (the admission policies); the API server ignores it there.
var clusterScoped = []string{"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
	"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

var (
	setupOnce sync.Once
	setupErr  error
	tools     *framework.Tools
	root      string
)

// setup finds the checkout and the pinned tools, once.
func setup(t testing.TB) {
	t.Helper()
	setupOnce.Do(func() {
		if root, setupErr = framework.RepoRoot(); setupErr != nil {
			return
		}
		tools, setupErr = framework.FindTools()
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func chartDir() string { return framework.ChartDir(root) }

// object is one rendered object, JSON-shaped.
type object = map[string]any

// helmTemplate renders the chart as release ipkeeper in ipkeeper-system,
// CRDs included, with args (values, or another --namespace) added.
func helmTemplate(t testing.TB, args ...string) []object {
	t.Helper()
	out, err := helmTemplateErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmTemplateErr(t testing.TB, args ...string) ([]object, error) {
	t.Helper()
	setup(t)
	out, err := framework.Helm(context.Background(), tools, "",
		append([]string{"template", release, chartDir(), "--namespace", namespace, "--kube-version", kubeVersion, "--include-crds"}, args...)...)
	if err != nil {
		return nil, err
	}
	objs, err := framework.DecodeObjects(out)
	if err != nil {
		return nil, fmt.Errorf("decoding helm template's output: %w", err)
	}
	return objs, nil
}

// kustomize renders a kustomization of the checkout with the pinned kubectl.
func kustomize(t testing.TB, dir string) []object {
	t.Helper()
	setup(t)
	out, err := runKubectl("kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeObjects(out)
	if err != nil {
		t.Fatalf("decoding kubectl kustomize %s: %v", dir, err)
	}
	return objs
}

// key names an object: API group, kind, namespace, name.
func key(o object) string {
	group, _, _ := strings.Cut(str(o, "apiVersion"), "/")
	if !strings.Contains(str(o, "apiVersion"), "/") {
		group = "core"
	}
	return fmt.Sprintf("%s/%s %s/%s", group, str(o, "kind"), str(o, "metadata", "namespace"), str(o, "metadata", "name"))
}

// normalize makes a rendered object comparable: Helm's labels go, and
// cluster-scoped kinds lose the namespace kustomize may have set.
func normalize(o object) object {
	o = deepCopy(o)
	meta, _ := o["metadata"].(map[string]any)
	if labels, ok := meta["labels"].(map[string]any); ok {
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			delete(meta, "labels")
		}
	}
	if slices.Contains(clusterScoped, str(o, "kind")) {
		delete(meta, "namespace")
	}
	return o
}

func index(objs []object) map[string]object {
	m := map[string]object{}
	for _, o := range objs {
		n := normalize(o)
		m[key(n)] = n
	}
	return m
}

// TestChartMatchesKustomize renders the chart for each install the
// kustomize tree offers and compares the two, object by object, after
// taking out Helm's own labels: a change to manifests/ that the chart does
// not follow (or the other way round) fails here, naming the object and
// the difference.
func TestChartMatchesKustomize(t *testing.T) {
	setup(t)
	for _, tc := range agreementCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			want := index(kustomize(t, filepath.Join(root, tc.kustomization)))
			gotObjs := helmTemplate(t, tc.values...)
			checkHelmConventions(t, gotObjs)
			got := index(gotObjs)
			if len(want) < 20 {
				t.Fatalf("kubectl kustomize %s gave %d objects; want the whole install", tc.kustomization, len(want))
			}
			var missing, extra []string
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					if k != kustomizeNamespace {
						missing = append(missing, k)
					}
					continue
				}
				if diff := cmp.Diff(w, g); diff != "" {
					t.Errorf("%s differs between %s (-) and the chart %v (+); change charts/ipkeeper/templates to match:\n%s", k, tc.kustomization, tc.values, diff)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok && !slices.Contains(tc.onlyInChart, k) {
					extra = append(extra, k)
				}
			}
			sort.Strings(missing)
			sort.Strings(extra)
			if len(missing) > 0 {
				t.Errorf("%s has objects the chart %v does not render: %s", tc.kustomization, tc.values, strings.Join(missing, ", "))
			}
			if len(extra) > 0 {
				t.Errorf("the chart %v renders objects %s does not have: %s", tc.values, tc.kustomization, strings.Join(extra, ", "))
			}
			if _, ok := want[kustomizeNamespace]; !ok {
				t.Errorf("%s no longer creates %s: drop kustomizeNamespace", tc.kustomization, kustomizeNamespace)
			}
			for _, o := range gotObjs {
				if str(o, "kind") == "Namespace" {
					t.Errorf("the chart %v renders Namespace %s; it installs into the release's", tc.values, str(o, "metadata", "name"))
				}
			}
			for _, k := range tc.onlyInChart {
				if _, ok := got[k]; !ok {
					t.Errorf("the chart %v does not render %s (expected only in the chart)", tc.values, k)
				}
			}
		})
	}
}

// kustomizeNamespace is the Namespace manifests/ creates and the chart
// does not: the chart installs into the release's namespace, which helm
// --create-namespace or the administrator makes.
const kustomizeNamespace = "core/Namespace /ipkeeper-system"

type agreementCase struct {
	name string
	// kustomization is the kustomize directory, relative to the checkout.
	kustomization string
	// values are helm template's arguments.
	values []string
	// onlyInChart are objects the chart renders and the kustomization
	// leaves out on purpose.
	onlyInChart []string
}

func agreementCases(t testing.TB) []agreementCase {
	t.Helper()
	return []agreementCase{
		{name: "default", kustomization: "manifests"},
		{name: "cert-manager", kustomization: "manifests/overlays/cert-manager", values: []string{"--set", "certificates.mode=cert-manager"}},
		{
			name: "monitoring", kustomization: "manifests/overlays/monitoring",
			values: []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true"},
		},
		{
			name: "openshift", kustomization: "manifests/overlays/openshift",
			values: []string{"-f", filepath.Join(chartDir(), "values-openshift.yaml")},
			// Helm's crds/ cannot be left out by values: Helm creates a CRD
			// of crds/ only when it is missing, and never changes or
			// deletes one, so OpenShift's own copy stays its own
			// (TestHelmInstallUpgradeUninstall in tests/install checks it).
			onlyInChart: []string{"apiextensions.k8s.io/CustomResourceDefinition /ipamclaims.k8s.cni.cncf.io"},
		},
	}
}

// checkHelmConventions checks what normalize hides on the chart's side:
// every templated object carries Helm's labels, and no cluster-scoped
// object a namespace.
func checkHelmConventions(t *testing.T, objs []object) {
	t.Helper()
	for _, o := range objs {
		k := key(o)
		if slices.Contains(clusterScoped, str(o, "kind")) && str(o, "metadata", "namespace") != "" {
			t.Errorf("the chart renders cluster-scoped %s with a namespace", k)
		}
		if str(o, "kind") == "CustomResourceDefinition" {
			continue // crds/ is not templated
		}
		for _, l := range helmLabels {
			if str(o, "metadata", "labels", l) == "" {
				t.Errorf("the chart renders %s without the label %s", k, l)
			}
		}
		if got := str(o, "metadata", "labels", "app.kubernetes.io/instance"); got != "" && got != release {
			t.Errorf("%s: app.kubernetes.io/instance=%q, want %q", k, got, release)
		}
	}
}

// TestChartCRDsAreTheManifests: charts/ipkeeper/crds holds exactly the CRDs manifests/crds' kustomization lists (what `make
// generate` copies; `make verify-generated` fails on a stale copy), so the
// chart never installs a CRD the kustomize install does not.
func TestChartCRDsAreTheManifests(t *testing.T) {
	setup(t)
	want := map[string]bool{}
	for _, o := range kustomize(t, filepath.Join(root, "manifests", "crds")) {
		want[str(o, "metadata", "name")] = true
	}
	entries, err := os.ReadDir(filepath.Join(chartDir(), "crds"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(chartDir(), "crds", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := framework.DecodeObjects(data)
		if err != nil || len(objs) != 1 || str(objs[0], "kind") != "CustomResourceDefinition" {
			t.Fatalf("charts/ipkeeper/crds/%s: want one CRD (err %v, %d objects)", e.Name(), err, len(objs))
		}
		got[str(objs[0], "metadata", "name")] = true
	}
	if !cmp.Equal(want, got) || len(got) < 4 {
		t.Fatalf("charts/ipkeeper/crds has %v, manifests/crds installs %v: run `make generate`", keys(got), keys(want))
	}
}

// str reads a string at path in o ("" when absent or not a string).
func str(o object, path ...string) string {
	s, _ := get(o, path...).(string)
	return s
}

// get reads the value at path in o: map keys, or list indexes as "0", "1".
func get(o any, path ...string) any {
	cur := o
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i := -1
			if _, err := fmt.Sscanf(p, "%d", &i); err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

func deepCopy(o object) object {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err) // decoded from JSON: always marshals
	}
	var c object
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// runKubectl runs the pinned kubectl without a cluster (kustomize).
func runKubectl(args ...string) ([]byte, error) {
	return runTool(tools.Kubectl, args...)
}

// runTool runs bin and returns its standard output; the error carries
// standard error.
func runTool(bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}
