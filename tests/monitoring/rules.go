// SPDX-License-Identifier: Apache-2.0

// Package monitoring checks ipkeeper's alerting rules with the pinned
// promtool. The PrometheusRule of manifests/components/monitoring is the
// one source: its spec.groups are written into a rules file promtool
// reads, next to the unit tests of testdata/ (which name that file), or
// next to a test file an integration test builds from the metrics a real
// controller exports.
package monitoring

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	// RuleFile is the PrometheusRule, relative to the repository root.
	RuleFile = "manifests/components/monitoring/prometheusrule.yaml"
	// RulesFileName is the rules file promtool's tests name in rule_files.
	RulesFileName = "ipkeeper-rules.yaml"
	// RunbookURLPrefix is what every alert's runbook_url starts with; the
	// alert name and ".md" follow (the Helm chart templates the prefix).
	RunbookURLPrefix = "https://github.com/ipkeeper/ipkeeper/blob/main/docs/runbooks/"
	// RunbookDir holds the runbooks, relative to the repository root.
	RunbookDir = "docs/runbooks"
)

// Rule is one alerting rule as the PrometheusRule writes it.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// Group is one rule group.
type Group struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// readRule returns the PrometheusRule's spec.groups, raw and parsed.
func readRule(root string) (raw any, groups []Group, err error) {
	data, err := os.ReadFile(filepath.Join(root, RuleFile))
	if err != nil {
		return nil, nil, err
	}
	var obj struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []Group `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", RuleFile, err)
	}
	if obj.Kind != "PrometheusRule" || len(obj.Spec.Groups) == 0 {
		return nil, nil, fmt.Errorf("%s: not a PrometheusRule with spec.groups", RuleFile)
	}
	var untyped struct {
		Spec struct {
			Groups any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &untyped); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", RuleFile, err)
	}
	return untyped.Spec.Groups, obj.Spec.Groups, nil
}

// Alerts returns the PrometheusRule's alerting rules, in order.
func Alerts(root string) ([]Rule, error) {
	_, groups, err := readRule(root)
	if err != nil {
		return nil, err
	}
	var out []Rule
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// WriteRulesFile writes the PrometheusRule's spec.groups, untouched, as a
// Prometheus rules file named RulesFileName into dir and returns its path.
func WriteRulesFile(root, dir string) (string, error) {
	groups, _, err := readRule(root)
	if err != nil {
		return "", err
	}
	data, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, RulesFileName)
	return path, os.WriteFile(path, data, 0o644)
}

// Promtool returns the pinned promtool: $IPKEEPER_PROMTOOL (the Makefile
// exports it), else the path `hack/tools.sh --env` computes. A missing
// binary is an error saying how to build it: the rules must not go
// untested silently.
func Promtool(root string) (string, error) {
	path := os.Getenv("IPKEEPER_PROMTOOL")
	if path == "" {
		out, err := exec.Command("bash", filepath.Join(root, "hack", "tools.sh"), "--env").Output()
		if err != nil {
			return "", fmt.Errorf("IPKEEPER_PROMTOOL is not set and hack/tools.sh --env failed: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "IPKEEPER_PROMTOOL="); ok {
				path = v
			}
		}
		if path == "" {
			return "", errors.New("IPKEEPER_PROMTOOL is not set and hack/tools.sh --env does not name it")
		}
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("promtool not found at %s (IPKEEPER_PROMTOOL): build the pinned one with `bash hack/tools.sh promtool` (make test-unit does): %w", path, err)
	}
	return path, nil
}

// RunPromtool runs promtool with args in dir and returns its output; a
// failure's error carries the output, which says which case failed.
func RunPromtool(promtool, dir string, args ...string) (string, error) {
	cmd := exec.Command(promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// TestFile is a promtool rule unit test file (the fields ipkeeper's use).
type TestFile struct {
	RuleFiles          []string    `json:"rule_files"`
	EvaluationInterval string      `json:"evaluation_interval,omitempty"`
	Tests              []TestGroup `json:"tests"`
}

// TestGroup is one test: input series and the alerts expected of them.
type TestGroup struct {
	Name           string        `json:"name,omitempty"`
	Interval       string        `json:"interval,omitempty"`
	InputSeries    []InputSeries `json:"input_series"`
	AlertRuleTests []AlertTest   `json:"alert_rule_test"`
}

// InputSeries is a series in PromQL notation and its values in
// promtool's expanding notation ("1+0x20").
type InputSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// AlertTest lists the alerts of one name firing at EvalTime; none means
// the alert must be silent then.
type AlertTest struct {
	EvalTime  string     `json:"eval_time"`
	Alertname string     `json:"alertname"`
	ExpAlerts []ExpAlert `json:"exp_alerts"`
}

// ExpAlert is a firing alert's labels (the rule's and the series') and
// expanded annotations.
type ExpAlert struct {
	ExpLabels      map[string]string `json:"exp_labels,omitempty"`
	ExpAnnotations map[string]string `json:"exp_annotations,omitempty"`
}

// ReadTestFile parses a promtool unit test file.
func ReadTestFile(path string) (*TestFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f TestFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}
