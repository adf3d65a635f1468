// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// docTable returns the rows of the first Markdown table after heading in
// doc, as cells (the header and separator rows left out).
func docTable(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no %q section", heading)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var rows [][]string
	lines := strings.Split(section, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| ---") {
			continue
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "| ---") {
			continue // header
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
		if len(rows) > 0 && i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "|") {
			break // the table ends
		}
	}
	if len(rows) == 0 {
		t.Fatalf("no table under %q", heading)
	}
	return rows
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// codes are the backquoted spans of a cell.
func codes(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHelmDocListsEveryValue keeps docs/helm.md's table of values whole
// and true: every value of values.yaml has a row (a map value either has
// its own row or rows for each of its keys), every row names a value, and
// a default written as one code span is the value's default.
func TestHelmDocListsEveryValue(t *testing.T) {
	setup(t)
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{} // value -> its default cell's code spans
	defaults := map[string]string{}
	for _, row := range docTable(t, readDoc(t, "helm.md"), "## Values") {
		names := codes(row[0])
		if len(names) != 1 || len(row) != 3 {
			t.Errorf("docs/helm.md: row %q: want | `value` | default | meaning |", strings.Join(row, " | "))
			continue
		}
		documented[names[0]] = codes(row[1])
		defaults[names[0]] = row[1]
	}

	var undocumented []string
	seen := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if _, ok := documented[prefix]; ok {
			seen[prefix] = true
			return
		}
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, child := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), child)
			}
			return
		}
		undocumented = append(undocumented, prefix)
	}
	walk("", values)
	sort.Strings(undocumented)
	if len(undocumented) > 0 {
		t.Errorf("values.yaml has values docs/helm.md's table does not list: %s", strings.Join(undocumented, ", "))
	}
	for name := range documented {
		if !seen[name] {
			t.Errorf("docs/helm.md lists %s, which is not a value of values.yaml", name)
		}
	}
	if len(seen) < 30 {
		t.Fatalf("only %d values matched: the table was not read", len(seen))
	}

	// A default given as exactly one code span is checked: scalars must be.
	for name := range seen {
		v := lookup(values, name)
		spans := documented[name]
		_, isMap := v.(map[string]any)
		_, isList := v.([]any)
		if len(spans) != 1 || strings.TrimSpace(defaults[name]) != "`"+spans[0]+"`" {
			if !isMap && !isList {
				t.Errorf("docs/helm.md: %s: the default %q must be one code span (a scalar)", name, defaults[name])
			}
			continue
		}
		var doc any
		if err := yaml.Unmarshal([]byte(spans[0]), &doc); err != nil {
			t.Errorf("docs/helm.md: %s: default %q: %v", name, spans[0], err)
			continue
		}
		if !reflect.DeepEqual(jsonShape(doc), jsonShape(v)) {
			t.Errorf("docs/helm.md: %s: default `%s`, values.yaml has %v", name, spans[0], v)
		}
	}
}

func lookup(values map[string]any, dotted string) any {
	var cur any = values
	for _, p := range strings.Split(dotted, ".") {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	return cur
}

func jsonShape(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// openShiftFacts read, from one render, what each row of docs/openshift.md's
// table "What the OpenShift install changes" states. overlayOnly rows are
// checked on the kustomize overlay alone.
var openShiftFacts = []openShiftFact{
	{setting: "the agent's CNI bin dir (host path of the volume `cni-bin`)", read: func(_ *testing.T, r *rendered) []string {
		return []string{hostPath(r.agent.Spec.Template.Spec, "cni-bin")}
	}},
	{setting: "SCC the agent's ServiceAccount may use", read: func(t *testing.T, r *rendered) []string {
		return sccsOf(t, r, "ipkeeper-agent")
	}},
	{setting: "SCC the controller's ServiceAccount may use", read: func(t *testing.T, r *rendered) []string {
		return sccsOf(t, r, "ipkeeper-controller")
	}},
	{setting: "annotation of the Service `ipkeeper-webhook`", read: func(_ *testing.T, r *rendered) []string {
		return annotations(r.find("Service", "ipkeeper-webhook"))
	}},
	{setting: "annotation of the webhook configuration `ipkeeper`", read: func(_ *testing.T, r *rendered) []string {
		return annotations(r.find("MutatingWebhookConfiguration", "ipkeeper"))
	}},
	{setting: "the controller's certificate flags, and the Secret mounted at `/certs`", read: func(_ *testing.T, r *rendered) []string {
		var out []string
		for _, a := range r.controllerArgs() {
			if strings.HasPrefix(a, "--webhook-cert-") {
				out = append(out, a)
			}
		}
		spec := r.controller.Spec.Template.Spec
		for _, m := range spec.Containers[0].VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && m.MountPath == "/certs" && v.Secret != nil {
					out = append(out, v.Secret.SecretName)
				}
			}
		}
		return out
	}},
	{setting: "the controller's `--claims-controller`", read: func(_ *testing.T, r *rendered) []string {
		if a := argNamed(r.controllerArgs(), "claims-controller"); a != "" {
			return []string{strings.TrimPrefix(a, "--claims-controller=")}
		}
		return []string{"auto"} // the flag's default
	}},
	{setting: "the controller's feature gate flag", read: func(_ *testing.T, r *rendered) []string {
		return []string{argNamed(r.controllerArgs(), "require-kubevirt-feature-gate")}
	}},
	{setting: "KubeVirt's controller in the policy `ipkeeper-launcher-identity`", read: func(_ *testing.T, r *rendered) []string {
		list := policyVariable(r.find("ValidatingAdmissionPolicy", "ipkeeper-launcher-identity")[0], "kubevirtControllers")
		var users []string
		for _, u := range strings.Split(strings.Trim(list, "[]"), ",") {
			users = append(users, strings.Trim(strings.TrimSpace(u), "'"))
		}
		return users
	}},
	{setting: "the TLS flags of both daemons", read: func(t *testing.T, r *rendered) []string {
		of := func(args []string) []string {
			var out []string
			for _, a := range args {
				if strings.HasPrefix(a, "--tls-") || strings.HasPrefix(a, "--enable-http2") {
					out = append(out, a)
				}
			}
			return out
		}
		if c, a := of(r.controllerArgs()), of(r.agentArgs()); !slices.Equal(c, a) {
			t.Errorf("the controller's TLS flags %q differ from the agent's %q", c, a)
		}
		return of(r.controllerArgs())
	}},
	{setting: "CRDs the overlay installs", overlayOnly: true, read: func(_ *testing.T, r *rendered) []string {
		var names []string
		for _, o := range r.find("CustomResourceDefinition", "") {
			names = append(names, str(o, "metadata", "name"))
		}
		return names
	}},
}

type openShiftFact struct {
	setting     string
	overlayOnly bool
	read        func(t *testing.T, r *rendered) []string
}

// annotations renders the annotations of objs as "key: value" lines, the
// value as YAML writes it.
func annotations(objs []object) []string {
	var out []string
	for _, o := range objs {
		m, _ := get(o, "metadata", "annotations").(map[string]any)
		for k, v := range m {
			b, _ := yaml.Marshal(map[string]any{k: v})
			out = append(out, strings.TrimSpace(string(b)))
		}
	}
	return out
}

// TestOpenShiftDocMatchesRender checks docs/openshift.md against what the
// OpenShift overlay and the chart with values-openshift.yaml render: each
// row of its table "What the OpenShift install changes" holds for both,
// every object the table does not cover is as in the default install, and
// the commands it gives name paths that exist.
func TestOpenShiftDocMatchesRender(t *testing.T) {
	setup(t)
	doc := readDoc(t, "openshift.md")
	rows := docTable(t, doc, "## What the OpenShift install changes")
	renders := map[string]*rendered{
		"manifests/overlays/openshift":         newRendered(t, kustomize(t, filepath.Join(root, "manifests", "overlays", "openshift"))),
		"the chart with values-openshift.yaml": newRendered(t, helmTemplate(t, "-f", filepath.Join(chartDir(), "values-openshift.yaml"))),
	}
	checked := map[string]bool{}
	for _, row := range rows {
		i := slices.IndexFunc(openShiftFacts, func(f openShiftFact) bool { return f.setting == row[0] })
		if i < 0 || len(row) != 2 {
			t.Errorf("docs/openshift.md: the test does not know the row %q (add it to openShiftFacts)", strings.Join(row, " | "))
			continue
		}
		fact := openShiftFacts[i]
		checked[fact.setting] = true
		want := codes(row[1])
		sort.Strings(want)
		for name, r := range renders {
			if fact.overlayOnly && name != "manifests/overlays/openshift" {
				continue
			}
			got := fact.read(t, r)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("docs/openshift.md says %s is %q; %s renders %q", fact.setting, want, name, got)
			}
		}
	}
	for _, f := range openShiftFacts {
		if !checked[f.setting] {
			t.Errorf("docs/openshift.md's table lacks the row %q", f.setting)
		}
	}

	// Nothing but the objects the table speaks of differs from the default
	// install.
	covered := []string{
		"apps/DaemonSet ipkeeper-system/ipkeeper-agent", "apps/Deployment ipkeeper-system/ipkeeper-controller",
		"core/Service ipkeeper-system/ipkeeper-webhook", "admissionregistration.k8s.io/MutatingWebhookConfiguration /ipkeeper",
		"admissionregistration.k8s.io/ValidatingAdmissionPolicy /ipkeeper-launcher-identity",
		"rbac.authorization.k8s.io/Role ipkeeper-system/ipkeeper-agent-scc", "rbac.authorization.k8s.io/RoleBinding ipkeeper-system/ipkeeper-agent-scc",
		"rbac.authorization.k8s.io/Role ipkeeper-system/ipkeeper-controller-scc", "rbac.authorization.k8s.io/RoleBinding ipkeeper-system/ipkeeper-controller-scc",
		"apiextensions.k8s.io/CustomResourceDefinition /ipamclaims.k8s.cni.cncf.io",
	}
	def := index(kustomize(t, filepath.Join(root, "manifests")))
	openshift := index(kustomize(t, filepath.Join(root, "manifests", "overlays", "openshift")))
	for k := range mergeKeys(def, openshift) {
		if !cmp.Equal(def[k], openshift[k]) && !slices.Contains(covered, k) {
			t.Errorf("the OpenShift overlay changes %s, which docs/openshift.md's table does not cover", k)
		}
	}

	// The commands: the overlay and the chart, with paths that exist.
	for _, want := range []string{
		"kubectl apply --server-side -k manifests/overlays/openshift/",
		"helm install ipkeeper charts/ipkeeper -n ipkeeper-system --create-namespace -f charts/ipkeeper/values-openshift.yaml",
	} {
		if !strings.Contains(doc, "\n"+strings.Repeat(" ", indentOf(doc, want))+want+"\n") {
			t.Errorf("docs/openshift.md does not give the command %q on a line of its own", want)
		}
	}
	paths := regexp.MustCompile(`\b(?:manifests|charts)/[A-Za-z0-9_./-]+`)
	for _, p := range paths.FindAllString(doc, -1) {
		if _, err := os.Stat(filepath.Join(root, strings.TrimRight(p, "./"))); err != nil {
			t.Errorf("docs/openshift.md names %s, which does not exist", p)
		}
	}
}

// indentOf is the indentation of the first line of doc containing s.
func indentOf(doc, s string) int {
	for _, line := range strings.Split(doc, "\n") {
		if strings.Contains(line, s) {
			return len(line) - len(strings.TrimLeft(line, " "))
		}
	}
	return 0
}

func mergeKeys(a, b map[string]object) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
