// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
	"github.com/ipkeeper/ipkeeper/tests/monitoring"
)

// The ipkeeper_controller_pool_* series a real controller serves on /metrics for a
// full pool make IPKeeperPoolExhausted fire (checked by promtool against
// the shipped rule), and those of a pool with room do not.
func TestPoolExhaustedAlertFromRealMetrics(t *testing.T) {
	ctx := context.Background()
	root := repoPath(t)
	promtool, err := monitoring.Promtool(root)
	if err != nil {
		t.Fatal(err)
	}
	ns := cp.NewNamespace(t, "alerts")
	metricsAddr := freeAddr(t)
	cp.StartController(t, ns, func(o *manager.Options) {
		o.EnableWebhook = false
		o.MetricsAddr = metricsAddr
	})
	pods := cp.CreatePods(t, ns, "", "holder", 3) // live owners: the collector keeps their reservations

	makePool := func(name, cidr string) *ipkeeperv1alpha1.IPPool {
		t.Helper()
		p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: cidr}}}}
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), p) })
		return p
	}
	hold := func(pool *ipkeeperv1alpha1.IPPool, ip string, owner *corev1.Pod) {
		t.Helper()
		r := ownedByPod(ns+"-net", ip, owner, owner.UID)
		r.Spec.Pool = pool.Name
		r.Name = naming.Reservation(pool.Name, netip.MustParseAddr(ip))
		if err := cp.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), r) })
	}
	full := makePool(ns+"-full", "10.79.0.0/30")   // .1-.2
	roomy := makePool(ns+"-roomy", "10.79.1.0/29") // .1-.6
	hold(full, "10.79.0.1", pods[0])
	hold(full, "10.79.0.2", pods[1])
	hold(roomy, "10.79.1.1", pods[2])

	// Scrape until the controller has counted every reservation.
	var series []monitoring.InputSeries
	var body string
	if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		body, err = scrape(ctx, "http://"+metricsAddr+"/metrics")
		if err != nil {
			return false, nil // not serving yet
		}
		series = poolSeries(body, metricsAddr, full.Name, roomy.Name)
		return strings.Contains(body, fmt.Sprintf(`ipkeeper_controller_pool_condition{condition="Exhausted",pool=%q} 1`, full.Name)) &&
			strings.Contains(body, fmt.Sprintf(`ipkeeper_controller_pool_condition{condition="Exhausted",pool=%q} 0`, roomy.Name)) &&
			strings.Contains(body, fmt.Sprintf(`ipkeeper_controller_pool_addresses{pool=%q,state="used"} 1`, roomy.Name)), nil
	}); err != nil {
		t.Fatalf("the controller's /metrics never showed %s exhausted and %s with room: %v\n%s", full.Name, roomy.Name, err, poolLines(body, full.Name, roomy.Name))
	}

	// The firing alert as the rule writes it, for the full pool only.
	var rule *monitoring.Rule
	alerts, err := monitoring.Alerts(root)
	if err != nil {
		t.Fatal(err)
	}
	for i := range alerts {
		if alerts[i].Alert == "IPKeeperPoolExhausted" {
			rule = &alerts[i]
		}
	}
	if rule == nil {
		t.Fatal("no IPKeeperPoolExhausted in the PrometheusRule")
	}
	labels := map[string]string{"pool": full.Name}
	for k, v := range rule.Labels {
		labels[k] = v
	}
	annotations := map[string]string{}
	for k, v := range rule.Annotations {
		annotations[k] = strings.ReplaceAll(v, "{{ $labels.pool }}", full.Name)
	}
	tf := monitoring.TestFile{
		RuleFiles:          []string{monitoring.RulesFileName},
		EvaluationInterval: "1m",
		Tests: []monitoring.TestGroup{{
			Name:        "scraped from a controller",
			Interval:    "1m",
			InputSeries: series,
			AlertRuleTests: []monitoring.AlertTest{
				{EvalTime: "10m", Alertname: "IPKeeperPoolExhausted", ExpAlerts: []monitoring.ExpAlert{{ExpLabels: labels, ExpAnnotations: annotations}}},
				// Exhausted, so not "nearly"; the roomy pool is below its threshold.
				{EvalTime: "20m", Alertname: "IPKeeperPoolNearlyExhausted", ExpAlerts: []monitoring.ExpAlert{}},
			},
		}},
	}
	dir := t.TempDir()
	if _, err := monitoring.WriteRulesFile(root, dir); err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(tf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scraped.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := monitoring.RunPromtool(promtool, dir, "test", "rules", "scraped.yaml"); err != nil {
		t.Fatalf("%v\ninput:\n%s", err, data)
	} else if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules said:\n%s", out)
	}
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func scrape(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %w", url, resp.Status, err)
	}
	return string(b), nil
}

// poolLines returns the exposition lines of the pools' ipkeeper_controller_pool_* series.
func poolLines(body string, pools ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ipkeeper_controller_pool_") {
			continue
		}
		for _, p := range pools {
			if strings.Contains(line, fmt.Sprintf("pool=%q", p)) {
				out = append(out, line)
			}
		}
	}
	return out
}

var sampleLine = regexp.MustCompile(`^([a-z_]+)\{(.*)\} (\S+)$`)

// poolSeries turns the pools' series into promtool input series with the
// target labels Prometheus adds (the ServiceMonitor's job), each holding
// its scraped value for the whole test.
func poolSeries(body, instance string, pools ...string) []monitoring.InputSeries {
	var out []monitoring.InputSeries
	for _, line := range poolLines(body, pools...) {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		out = append(out, monitoring.InputSeries{
			Series: fmt.Sprintf(`%s{%s,job="ipkeeper-controller",instance=%q}`, m[1], m[2], instance),
			Values: m[3] + "x30",
		})
	}
	return out
}

// The monitoring overlay renders with its ServiceMonitors, rule and RBAC,
// and so does the kustomization docs/monitoring.md shows (the component
// next to another overlay), its paths pointed at this checkout.
func TestMonitoringManifestsRender(t *testing.T) {
	ctx := context.Background()
	root := repoPath(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	example := ""
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		if block, _, ok := strings.Cut(block, "```"); ok && strings.Contains(block, "components/monitoring") && strings.Contains(block, "kind: Kustomization") {
			example = block
			break
		}
	}
	if example == "" {
		t.Fatal("docs/monitoring.md shows no kustomization using manifests/components/monitoring")
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(strings.ReplaceAll(example, "<ipkeeper>", rel)), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"overlay": filepath.Join(root, "manifests", "overlays", "monitoring"), "docs example": dir} {
		t.Run(name, func(t *testing.T) {
			out, err := cp.Kubectl(ctx, nil, "kustomize", path)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, d := range strings.Split(string(out), "\n---\n") {
				var o struct {
					Kind     string `json:"kind"`
					Metadata struct {
						Name      string `json:"name"`
						Namespace string `json:"namespace"`
					} `json:"metadata"`
				}
				if err := yaml.Unmarshal([]byte(d), &o); err != nil {
					t.Fatal(err)
				}
				kinds[o.Kind+"/"+o.Metadata.Namespace+"/"+o.Metadata.Name] = true
			}
			for _, want := range []string{"ServiceMonitor/ipkeeper-system/ipkeeper-controller", "ServiceMonitor/ipkeeper-system/ipkeeper-agent",
				"PrometheusRule/ipkeeper-system/ipkeeper", "Role/ipkeeper-system/ipkeeper-prometheus", "RoleBinding/ipkeeper-system/ipkeeper-prometheus",
				"Deployment/ipkeeper-system/ipkeeper-controller", "DaemonSet/ipkeeper-system/ipkeeper-agent"} {
				if !kinds[want] {
					t.Errorf("%s missing from the rendered objects", want)
				}
			}
		})
	}
}
