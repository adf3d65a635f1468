// SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/cli"
)

// repoRoot is the checkout's root: go test runs in this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests in testdata (%v)", err)
	}
	return files
}

// The rules pass promtool's check, and every unit test in testdata passes:
// each alert fires on the series that should fire it and stays silent on
// those that should not.
func TestAlertRules(t *testing.T) {
	root := repoRoot(t)
	promtool, err := Promtool(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules, err := WriteRulesFile(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := RunPromtool(promtool, dir, "check", "rules", rules); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules said:\n%s", out)
	}
	// The tests name the rules file by its base name: copied next to it.
	var names []string
	for _, f := range testFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	out, err := RunPromtool(promtool, dir, append([]string{"test", "rules"}, names...)...)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "SUCCESS"); n != len(names) {
		t.Fatalf("%d of %d test files passed:\n%s", n, len(names), out)
	}
}

// A missing promtool fails the tests with the way to build it.
func TestPromtoolMissing(t *testing.T) {
	t.Setenv("IPKEEPER_PROMTOOL", filepath.Join(t.TempDir(), "promtool"))
	_, err := Promtool(repoRoot(t))
	if err == nil || !strings.Contains(err.Error(), "bash hack/tools.sh promtool") {
		t.Fatalf("Promtool() = %v, want an error saying how to build it", err)
	}
}

var alertName = regexp.MustCompile(`^IPKeeper[A-Z][A-Za-z]+$`)

// Every alert follows the KubeVirt ecosystem's conventions: severity,
// operator_health_impact, part-of and component labels, a summary, a
// description and a runbook_url the Helm chart can template (prefix, alert
// name, ".md").
func TestAlertConventions(t *testing.T) {
	alerts, err := Alerts(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range alerts {
		if !alertName.MatchString(a.Alert) || seen[a.Alert] {
			t.Errorf("alert %q: want a unique IPKeeper... name", a.Alert)
		}
		seen[a.Alert] = true
		if a.For == "" {
			t.Errorf("%s: no for: one bad evaluation would page", a.Alert)
		}
		allowed := map[string][]string{
			"severity":                      {"info", "warning", "critical"},
			"operator_health_impact":        {"none", "warning", "critical"},
			"kubernetes_operator_part_of":   {"ipkeeper"},
			"kubernetes_operator_component": {"ipkeeper-controller", "ipkeeper-agent"},
		}
		for label, values := range allowed {
			if !slices.Contains(values, a.Labels[label]) {
				t.Errorf("%s: label %s=%q, want one of %q", a.Alert, label, a.Labels[label], values)
			}
		}
		if len(a.Labels) != len(allowed) {
			t.Errorf("%s: labels %v, want exactly %d", a.Alert, a.Labels, len(allowed))
		}
		for _, k := range []string{"summary", "description"} {
			if strings.TrimSpace(a.Annotations[k]) == "" {
				t.Errorf("%s: no %s annotation", a.Alert, k)
			}
		}
		if got, want := a.Annotations["runbook_url"], RunbookURLPrefix+a.Alert+".md"; got != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, got, want)
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}
}

// Every alert has a runbook and a promtool case that fires it and one
// that does not; every runbook and every test case is of an alert.
func TestEveryAlertHasRunbookAndTests(t *testing.T) {
	root := repoRoot(t)
	alerts, err := Alerts(root)
	if err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, f := range testFiles(t) {
		tf, err := ReadTestFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tf.RuleFiles, []string{RulesFileName}) {
			t.Errorf("%s: rule_files %q, want [%s] (the file the tests write from the PrometheusRule)", f, tf.RuleFiles, RulesFileName)
		}
		for _, g := range tf.Tests {
			for _, at := range g.AlertRuleTests {
				if len(at.ExpAlerts) > 0 {
					fires[at.Alertname]++
				} else {
					silent[at.Alertname]++
				}
			}
		}
	}
	names := map[string]bool{}
	for _, a := range alerts {
		names[a.Alert] = true
		if fires[a.Alert] == 0 {
			t.Errorf("%s: no promtool case in testdata where it fires", a.Alert)
		}
		if silent[a.Alert] == 0 {
			t.Errorf("%s: no promtool case in testdata where it stays silent", a.Alert)
		}
		if _, err := os.Stat(filepath.Join(root, RunbookDir, a.Alert+".md")); err != nil {
			t.Errorf("%s: no runbook: %v", a.Alert, err)
		}
	}
	for name := range fires {
		if !names[name] {
			t.Errorf("testdata fires %s, which is no alert", name)
		}
	}
	for name := range silent {
		if !names[name] {
			t.Errorf("testdata tests %s, which is no alert", name)
		}
	}
	runbooks, err := filepath.Glob(filepath.Join(root, RunbookDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range runbooks {
		if name, ok := strings.CutSuffix(filepath.Base(p), ".md"); !ok || !names[name] {
			t.Errorf("%s: no alert of that name", filepath.Join(RunbookDir, filepath.Base(p)))
		}
	}
}

var runbookSections = []string{"## Meaning", "## Impact", "## Diagnosis", "## Mitigation"}

// Each runbook has its sections, starts with its alert's name, and uses
// only kubectl ipkeeper commands and flags that exist.
func TestRunbooks(t *testing.T) {
	root := repoRoot(t)
	alerts, err := Alerts(root)
	if err != nil {
		t.Fatal(err)
	}
	flagSets := cli.FlagSets()
	for _, a := range alerts {
		path := filepath.Join(root, RunbookDir, a.Alert+".md")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", a.Alert, err)
			continue
		}
		text := string(data)
		if !strings.HasPrefix(text, "# "+a.Alert+"\n") {
			t.Errorf("%s: does not start with '# %s'", path, a.Alert)
		}
		last := -1
		for _, s := range runbookSections {
			i := strings.Index(text, "\n"+s+"\n")
			if i < 0 || i < last {
				t.Errorf("%s: section %q missing or out of order (want %q)", path, s, runbookSections)
			}
			last = i
		}
		uses := 0
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			_, cmdline, ok := strings.Cut(sc.Text(), "kubectl ipkeeper ")
			if !ok {
				continue
			}
			uses++
			words := strings.Fields(strings.SplitN(cmdline, "`", 2)[0])
			if len(words) == 0 {
				t.Errorf("%s: %q names no command", path, sc.Text())
				continue
			}
			fs, ok := flagSets[words[0]]
			if !ok {
				t.Errorf("%s: kubectl ipkeeper has no command %q", path, words[0])
				continue
			}
			for _, w := range words[1:] {
				flag, isFlag := strings.CutPrefix(w, "-")
				if !isFlag {
					continue
				}
				flag, _, _ = strings.Cut(strings.TrimPrefix(flag, "-"), "=")
				if fs.Lookup(flag) == nil && fs.ShorthandLookup(flag) == nil {
					t.Errorf("%s: kubectl ipkeeper %s has no flag %q", path, words[0], w)
				}
			}
		}
		if uses == 0 {
			t.Errorf("%s: its diagnosis uses no kubectl ipkeeper command", path)
		}
	}
}

type servicePort struct {
	Name string `json:"name"`
}

// manifestObject is what the ServiceMonitor check reads of an object.
type manifestObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		// Service
		Ports []servicePort `json:"ports"`
		// ServiceMonitor
		JobLabel string `json:"jobLabel"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port string `json:"port"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func readObjects(t *testing.T, paths ...string) []manifestObject {
	t.Helper()
	var out []manifestObject
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var o manifestObject
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if o.Kind != "" {
				out = append(out, o)
			}
		}
	}
	return out
}

// Each ServiceMonitor scrapes exactly one Service's metrics port (the
// controller's selector also matches its webhook Service, which has no
// such port), in its namespace, and names the job the alerts expect.
func TestServiceMonitorsScrapeTheMetricsServices(t *testing.T) {
	root := repoRoot(t)
	services := readObjects(t, filepath.Join(root, "manifests/base/controller/service.yaml"), filepath.Join(root, "manifests/base/agent/service.yaml"))
	monitors := readObjects(t, filepath.Join(root, "manifests/components/monitoring/servicemonitor.yaml"))
	wantJobs := map[string]string{"ipkeeper-controller": "ipkeeper-controller", "ipkeeper-agent": "ipkeeper-agent"}
	for _, sm := range monitors {
		if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) != 1 {
			t.Errorf("%s %s: want a ServiceMonitor with one endpoint", sm.Kind, sm.Metadata.Name)
			continue
		}
		port := sm.Spec.Endpoints[0].Port
		var scraped []manifestObject
		for _, svc := range services {
			matches := svc.Metadata.Namespace == sm.Metadata.Namespace && len(sm.Spec.Selector.MatchLabels) > 0
			for k, v := range sm.Spec.Selector.MatchLabels {
				matches = matches && svc.Metadata.Labels[k] == v
			}
			hasPort := slices.ContainsFunc(svc.Spec.Ports, func(p servicePort) bool { return p.Name == port })
			if matches && hasPort {
				scraped = append(scraped, svc)
			}
		}
		if len(scraped) != 1 {
			t.Errorf("ServiceMonitor %s scrapes %d Services' port %q, want the one metrics Service", sm.Metadata.Name, len(scraped), port)
			continue
		}
		if job, want := scraped[0].Metadata.Labels[sm.Spec.JobLabel], wantJobs[sm.Metadata.Name]; job == "" || job != want {
			t.Errorf("ServiceMonitor %s: job %q (from the Service's label %q), want %q", sm.Metadata.Name, job, sm.Spec.JobLabel, want)
		}
		delete(wantJobs, sm.Metadata.Name)
	}
	if len(wantJobs) != 0 {
		t.Errorf("no ServiceMonitor for %v", wantJobs)
	}
}
