// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// chartMeta is what the tests read of Chart.yaml.
type chartMeta struct {
	AppVersion  string            `json:"appVersion"`
	KubeVersion string            `json:"kubeVersion"`
	Icon        string            `json:"icon"`
	Annotations map[string]string `json:"annotations"`
	Maintainers []struct {
		Name string `json:"name"`
	} `json:"maintainers"`
}

func readChartMeta(t *testing.T) chartMeta {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m chartMeta
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return m
}

// annotationList decodes a YAML list annotation of Chart.yaml.
func annotationList[T any](t *testing.T, m chartMeta, name string) []T {
	t.Helper()
	raw, ok := m.Annotations[name]
	if !ok {
		t.Fatalf("Chart.yaml has no annotation %s", name)
	}
	var out []T
	if err := yaml.UnmarshalStrict([]byte(raw), &out); err != nil {
		t.Fatalf("Chart.yaml: annotation %s: %v", name, err)
	}
	return out
}

// TestChartArtifactHubMetadata keeps Chart.yaml's Artifact Hub
// annotations true: the images are those the default values deploy, the
// CRDs those of crds/, the maintainers OWNERS' approvers.
func TestChartArtifactHubMetadata(t *testing.T) {
	setup(t)
	m := readChartMeta(t)

	// Images: every image the default render runs, and nothing else.
	type image struct {
		Name  string `json:"name"`
		Image string `json:"image"`
	}
	var listed []string
	for _, i := range annotationList[image](t, m, "artifacthub.io/images") {
		listed = append(listed, i.Image)
	}
	var deployed []string
	r := render(t)
	for _, spec := range [][]string{containerImages(r.controller.Spec.Template.Spec.Containers), containerImages(r.agent.Spec.Template.Spec.Containers)} {
		for _, i := range spec {
			if !slices.Contains(deployed, i) {
				deployed = append(deployed, i)
			}
		}
	}
	slices.Sort(listed)
	slices.Sort(deployed)
	if !slices.Equal(listed, deployed) {
		t.Errorf("Chart.yaml's artifacthub.io/images lists %v; the default values deploy %v", listed, deployed)
	}

	// CRDs: kind, version and name as the files of crds/ have them.
	type crd struct {
		Kind        string `json:"kind"`
		Version     string `json:"version"`
		Name        string `json:"name"`
		DisplayName string `json:"displayName"`
		Description string `json:"description"`
	}
	got := map[string]crd{}
	for _, c := range annotationList[crd](t, m, "artifacthub.io/crds") {
		if c.DisplayName == "" || c.Description == "" {
			t.Errorf("artifacthub.io/crds: %s lacks a displayName or description", c.Name)
		}
		got[c.Name] = c
	}
	files, err := filepath.Glob(filepath.Join(chartDir(), "crds", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("the chart's CRDs: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := framework.DecodeObjects(data)
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %v (%d objects)", f, err, len(objs))
		}
		name := str(objs[0], "metadata", "name")
		c, ok := got[name]
		if !ok {
			t.Errorf("artifacthub.io/crds does not list %s (crds/%s)", name, filepath.Base(f))
			continue
		}
		delete(got, name)
		if kind := str(objs[0], "spec", "names", "kind"); c.Kind != kind {
			t.Errorf("artifacthub.io/crds: %s has kind %q, crds/ %q", name, c.Kind, kind)
		}
		var versions []string
		vs, _ := get(objs[0], "spec", "versions").([]any)
		for _, v := range vs {
			if served, _ := get(v, "served").(bool); served {
				versions = append(versions, str(v.(map[string]any), "name"))
			}
		}
		if !slices.Contains(versions, c.Version) {
			t.Errorf("artifacthub.io/crds: %s version %q; crds/ serves %v", name, c.Version, versions)
		}
	}
	for name := range got {
		t.Errorf("artifacthub.io/crds lists %s, which crds/ does not have", name)
	}

	// The crdsExamples are objects of the listed kinds.
	for _, ex := range annotationList[map[string]any](t, m, "artifacthub.io/crdsExamples") {
		if !strings.HasPrefix(str(ex, "apiVersion"), "ipkeeper.io/") || str(ex, "metadata", "name") == "" {
			t.Errorf("artifacthub.io/crdsExamples: %v is no ipkeeper object", ex)
		}
	}

	if m.Annotations["artifacthub.io/license"] != "Apache-2.0" {
		t.Errorf("artifacthub.io/license %q, want Apache-2.0 (LICENSE)", m.Annotations["artifacthub.io/license"])
	}
	if p := m.Annotations["artifacthub.io/prerelease"]; p != "true" && p != "false" {
		t.Errorf("artifacthub.io/prerelease %q, want true or false", p)
	}
	type link struct {
		Name string `json:"name"`
		URL  string `json:"url"`
	}
	for _, l := range annotationList[link](t, m, "artifacthub.io/links") {
		// Links into the repository name files that exist.
		const repo = "https://github.com/ipkeeper/ipkeeper/"
		path, ok := strings.CutPrefix(l.URL, repo)
		if !ok {
			t.Errorf("artifacthub.io/links: %s %s is not in the repository", l.Name, l.URL)
			continue
		}
		_, path, _ = strings.Cut(path, "/main/") // blob/main/ or tree/main/
		if _, err := os.Stat(filepath.Join(root, path)); path == "" || err != nil {
			t.Errorf("artifacthub.io/links: %s %s names no file of the checkout", l.Name, l.URL)
		}
	}

	owners, err := os.ReadFile(filepath.Join(root, "OWNERS"))
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		Approvers []string `json:"approvers"`
	}
	if err := yaml.Unmarshal(owners, &o); err != nil {
		t.Fatal(err)
	}
	var maintainers []string
	for _, mt := range m.Maintainers {
		maintainers = append(maintainers, mt.Name)
	}
	if !slices.Equal(maintainers, o.Approvers) {
		t.Errorf("Chart.yaml's maintainers %v; OWNERS' approvers %v", maintainers, o.Approvers)
	}
}

func containerImages(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Image)
	}
	return out
}

// TestChartKubeVersion: the chart refuses a Kubernetes older than the one
// docs/install.md requires (1.32), naming kubeVersion, and renders for it.
func TestChartKubeVersion(t *testing.T) {
	setup(t)
	if got := readChartMeta(t).KubeVersion; got != ">=1.32.0-0" {
		t.Errorf("kubeVersion %q, want >=1.32.0-0 (docs/install.md#requirements)", got)
	}
	for _, v := range []string{"v1.32.0", "v1.32.3-gke.100"} {
		if _, err := helmTemplateErr(t, "--kube-version", v); err != nil {
			t.Errorf("Kubernetes %s: %v", v, err)
		}
	}
	_, err := helmTemplateErr(t, "--kube-version", "v1.31.9")
	if err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("Kubernetes 1.31: got %v, want the chart to refuse it naming kubeVersion", err)
	}
}

// TestValuesTableIsGenerated: the values tables of the chart's README and
// docs/helm.md are what hack/chartdoc writes from values.yaml now.
func TestValuesTableIsGenerated(t *testing.T) {
	setup(t)
	cmd := exec.CommandContext(context.Background(), "go", "run", "./hack/chartdoc", "-check",
		"-values", "charts/ipkeeper/values.yaml", "charts/ipkeeper/README.md", "docs/helm.md")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, doc := range []string{filepath.Join(chartDir(), "README.md"), filepath.Join(root, "docs", "helm.md")} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "| `controller.podLabels` |") {
			t.Errorf("%s has no generated row of controller.podLabels", doc)
		}
	}
}
