// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

var (
	buildOnce sync.Once
	bins      *framework.Binaries
	minimal   string // a Go binary that prints {} and exits, built like the shim
	buildErr  error
	// workDir is short: agent sockets live in it (unix socket paths are limited).
	workDir string
)

// binaries builds the ipkeeper commands and the minimal Go binary once per run.
func binaries(b *testing.B) *framework.Binaries {
	b.Helper()
	buildOnce.Do(func() {
		root, err := framework.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		ctx := context.Background()
		if bins, buildErr = framework.BuildBinaries(ctx, root, filepath.Join(workDir, "bin")); buildErr != nil {
			return
		}
		minimal, buildErr = buildMinimal(ctx, filepath.Join(workDir, "minimal"))
	})
	if buildErr != nil {
		b.Fatalf("building: %v", buildErr)
	}
	return bins
}

// buildMinimal builds, with the shim's flags, the smallest Go program a CNI
// plugin could be: the floor for exec time.
func buildMinimal(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{
		"go.mod":  "module minimal\n\ngo 1.24\n",
		"main.go": "package main\n\nimport \"os\"\n\nfunc main() { _, _ = os.Stdout.WriteString(\"{}\") }\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, "minimal")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the minimal binary: %w\n%s", err, o)
	}
	return out, nil
}

// node is one simulated node: a real ipkeeper-agent process.
type node struct {
	name    string
	proc    *framework.AgentProcess
	client  *cniproto.Client
	metrics string // URL of its /metrics
	pprof   string // URL of its /debug/pprof/ when profiled (IPKEEPER_BENCH_PROFILE_DIR), else empty
}

var nodeSeq int

// startNodes starts n agent processes (nodes prefix-0...) and waits until
// all are ready. stop ends them; it also runs when b ends.
func startNodes(b *testing.B, prefix string, n int) (nodes []*node, stop func()) {
	b.Helper()
	return startNodesOn(b, cp, prefix, n)
}

// startNodesOn is startNodes on control plane c.
func startNodesOn(b *testing.B, c *framework.ControlPlane, prefix string, n int) (nodes []*node, stop func()) {
	b.Helper()
	bin := binaries(b)
	nodeSeq++
	var once sync.Once
	stop = func() {
		once.Do(func() {
			var wg sync.WaitGroup
			for _, nd := range nodes {
				wg.Add(1)
				go func() { defer wg.Done(); _ = nd.proc.Stop() }()
			}
			wg.Wait()
		})
	}
	b.Cleanup(stop)
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		addr, health := loopbackAddr(b), loopbackAddr(b)
		args, pprofURL := []string{"--log-level=warn"}, ""
		if os.Getenv("IPKEEPER_BENCH_PROFILE_DIR") != "" {
			pp := loopbackAddr(b)
			args, pprofURL = append(args, "--profiling-bind-address="+pp), "http://"+pp+"/debug/pprof/"
		}
		proc, err := framework.StartAgentProcess(framework.AgentProcessOptions{
			Binary: bin.Agent, Kubeconfig: c.KubeconfigPath, NodeName: name,
			Dir:         filepath.Join(workDir, fmt.Sprintf("s%d-n%d", nodeSeq, i)),
			ExtraArgs:   args,
			HealthAddr:  health,
			MetricsAddr: addr,
		})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, &node{name: name, proc: proc, metrics: "http://" + addr + "/metrics", pprof: pprofURL,
			client: &cniproto.Client{SocketPath: proc.Socket, Timeout: 120 * time.Second}})
	}
	for _, nd := range nodes {
		if err := nd.proc.WaitReady(context.Background(), 5*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	return nodes, stop
}

// nextPort walks loopback ports below the kernel's ephemeral range (32768
// and up by default): a port picked there by binding to :0 and closing can
// be handed out again, to another agent or as the local port of one of the
// dozens of agents' connections, before its agent binds it.
var nextPort = 20000

func loopbackAddr(b *testing.B) string {
	b.Helper()
	for ; nextPort < 32768; nextPort++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(nextPort)))
		if err != nil {
			continue // taken
		}
		_ = l.Close()
		nextPort++
		return l.Addr().String()
	}
	b.Fatal("no free loopback port below 32768")
	return ""
}

// add sends a CNI ADD for p straight to the node's socket (no exec).
func (n *node) add(ctx context.Context, p *corev1.Pod, containerID string, conf json.RawMessage) error {
	return n.addAs(ctx, p, containerID, "net1", conf)
}

// addAs is add of interface ifName (a VM launcher's is KubeVirt's hashed
// name, which its claim records).
func (n *node) addAs(ctx context.Context, p *corev1.Pod, containerID, ifName string, conf json.RawMessage) error {
	_, err := n.client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: containerID, Netns: "/var/run/netns/" + p.Name,
		IfName: ifName, Args: podArgs(p, containerID), Config: conf,
	})
	return err
}

func podArgs(p *corev1.Pod, containerID string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s;K8S_POD_INFRA_CONTAINER_ID=%s",
		p.Namespace, p.Name, p.UID, containerID)
}

// execPlugin runs a CNI plugin binary as a runtime does: the command and
// the attachment in the environment, the network configuration on stdin.
// socket, if set, is the node's agent socket (IPKEEPER_AGENT_SOCKET).
func execPlugin(ctx context.Context, binary, command, socket string, p *corev1.Pod, conf []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, binary)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_PATH=" + filepath.Dir(binary)}
	if socket != "" {
		cmd.Env = append(cmd.Env, cniproto.SocketPathEnv+"="+socket)
	}
	if p != nil {
		id := framework.SandboxID(p)
		cmd.Env = append(cmd.Env, "CNI_CONTAINERID="+id, "CNI_NETNS=/var/run/netns/"+p.Name,
			"CNI_IFNAME=net1", "CNI_ARGS="+podArgs(p, id))
	}
	cmd.Stdin = bytes.NewReader(conf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s %s", filepath.Base(binary), command, err, out, stderr.Bytes())
	}
	return out, nil
}

// metricFamilies scrapes a Prometheus text endpoint.
func metricFamilies(body []byte) (map[string]*dto.MetricFamily, error) {
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return mfs, nil
}

func (n *node) scrape(b *testing.B) map[string]*dto.MetricFamily {
	b.Helper()
	return scrapeURL(b, n.name, n.metrics)
}

// scrapeURL scrapes the Prometheus endpoint url of the process called who.
func scrapeURL(b *testing.B, who, url string) map[string]*dto.MetricFamily {
	b.Helper()
	resp, err := http.Get(url) //nolint:noctx // a local scrape in a benchmark
	if err != nil {
		b.Fatalf("scraping %s: %v", who, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		b.Fatal(err)
	}
	mfs, err := metricFamilies(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	return mfs
}

// apiMetrics scrapes the API server's /metrics.
func apiMetrics(b *testing.B) map[string]*dto.MetricFamily {
	b.Helper()
	return apiMetricsOf(b, cp)
}

// apiMetricsOf scrapes the /metrics of control plane c's API server.
func apiMetricsOf(b *testing.B, c *framework.ControlPlane) map[string]*dto.MetricFamily {
	b.Helper()
	body, err := c.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("scraping the API server: %v", err)
	}
	mfs, err := metricFamilies(body)
	if err != nil {
		b.Fatal(err)
	}
	return mfs
}

// sum adds the counter, gauge or untyped values of a family whose labels
// include every pair of where (name, value, name, value...).
func sum(mfs map[string]*dto.MetricFamily, name string, where ...string) float64 {
	mf, ok := mfs[name]
	if !ok {
		return 0
	}
	var s float64
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(where); i += 2 {
			if !hasLabel(m, where[i], where[i+1]) {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			s += m.GetCounter().GetValue()
		case m.Gauge != nil:
			s += m.GetGauge().GetValue()
		case m.Untyped != nil:
			s += m.GetUntyped().GetValue()
		}
	}
	return s
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// histogram returns the cumulative buckets, count and sum of a histogram
// series with the given label pair.
func histogram(mfs map[string]*dto.MetricFamily, name, label, value string) (buckets []*dto.Bucket, count uint64, total float64) {
	for _, m := range mfs[name].GetMetric() {
		if hasLabel(m, label, value) {
			h := m.GetHistogram()
			return h.GetBucket(), h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return nil, 0, 0
}

// bucketQuantile estimates quantile q of the observations between two
// scrapes of a histogram, interpolating linearly inside a bucket (as
// Prometheus' histogram_quantile does).
func bucketQuantile(q float64, before, after []*dto.Bucket) float64 {
	if len(after) == 0 {
		return 0
	}
	counts := make([]float64, len(after))
	for i, bk := range after {
		counts[i] = float64(bk.GetCumulativeCount())
		if i < len(before) {
			counts[i] -= float64(before[i].GetCumulativeCount())
		}
	}
	total := counts[len(counts)-1]
	if total == 0 {
		return 0
	}
	rank := q * total
	lower, prev := 0.0, 0.0
	for i, c := range counts {
		upper := after[i].GetUpperBound()
		if c >= rank {
			if c == prev {
				return upper
			}
			return lower + (upper-lower)*(rank-prev)/(c-prev)
		}
		lower, prev = upper, c
	}
	return after[len(after)-1].GetUpperBound()
}

// procStat is a process's CPU time (user+system) and resident memory.
type procStat struct {
	cpu time.Duration
	rss float64 // bytes
}

const clockTicks = 100 // USER_HZ on Linux

func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// Fields after the command (which may hold spaces) in parentheses;
	// utime and stime are fields 14 and 15, i.e. 12 and 13 after it.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	rssPages, _ := strconv.ParseInt(f[21], 10, 64)
	return procStat{
		cpu: time.Duration(ut+st) * time.Second / clockTicks,
		rss: float64(rssPages * int64(os.Getpagesize())),
	}, nil
}

func (n *node) stat(b *testing.B) procStat {
	b.Helper()
	return processStat(b, n.proc.PID())
}

// processStat is readProcStat, ending the benchmark on an error.
func processStat(b *testing.B, pid int) procStat {
	b.Helper()
	s, err := readProcStat(pid)
	if err != nil {
		b.Fatalf("reading /proc of process %d: %v", pid, err)
	}
	return s
}

// createPodsOn creates perNode pods on each node, and returns them
// round-robin over the nodes, so that all agents work at once.
func createPodsOn(b *testing.B, ns string, nodes []*node, perNode int) (pods []*corev1.Pod, owner []*node) {
	b.Helper()
	byNode := make([][]*corev1.Pod, len(nodes))
	for i, nd := range nodes {
		byNode[i] = cp.CreatePods(b, ns, nd.name, nd.name, perNode)
	}
	for k := range perNode {
		for i, nd := range nodes {
			pods = append(pods, byNode[i][k])
			owner = append(owner, nd)
		}
	}
	return pods, owner
}

// controlPlaneCPU is the CPU time so far of the kube-apiserver and etcd
// processes this test started: in every figure but the exec'd ones they,
// not the agents, use most of the CPU.
func controlPlaneCPU(b *testing.B) (apiserver, etcd time.Duration) {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
		if open < 0 || end < open {
			continue
		}
		comm := string(raw[open+1 : end])
		f := strings.Fields(string(raw[end+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(self) || (comm != "kube-apiserver" && comm != "etcd") {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue
		}
		if comm == "etcd" {
			etcd += st.cpu
		} else {
			apiserver += st.cpu
		}
	}
	return apiserver, etcd
}

// settleControlPlane makes the kube-apiserver collect its garbage now and
// then waits until it and etcd are idle (below settledShare of a core over
// settleWindow), for at most settleDeadline. A phase that follows setup
// (thousands of watches opened, thousands of pods created) otherwise pays
// for that setup's garbage in its own window, by chance of when the
// collector runs. (It does not make single storms agree: figure 2's
// rounds are for that.)
func settleControlPlane(b *testing.B) {
	b.Helper()
	// The heap profile's gc=1 runs the collector first (kube-apiserver
	// serves /debug/pprof by default); the profile itself is discarded.
	if _, err := cp.Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").
		Timeout(time.Minute).DoRaw(context.Background()); err != nil {
		b.Fatalf("making kube-apiserver collect its garbage: %v", err)
	}
	deadline := time.Now().Add(settleDeadline)
	for {
		m := startCPU(b)
		t0 := time.Now()
		<-time.After(settleWindow)
		used := m.since(b)
		share := float64(used.api+used.etcd) / float64(time.Since(t0))
		if share < settledShare {
			return
		}
		if time.Now().After(deadline) {
			b.Logf("the control plane did not settle within %v (last %.0f%% of a core); measuring anyway", settleDeadline, 100*share)
			return
		}
	}
}

// What settleControlPlane waits for.
const (
	settleWindow   = 500 * time.Millisecond
	settledShare   = 0.10
	settleDeadline = 30 * time.Second
)

// cpuMeter measures the control plane's CPU time over a span of work.
type cpuMeter struct{ api, etcd time.Duration }

func startCPU(b *testing.B) cpuMeter {
	a, e := controlPlaneCPU(b)
	return cpuMeter{a, e}
}

// since returns the API server's and etcd's CPU time from m to now.
func (m cpuMeter) since(b *testing.B) cpuMeter {
	a, e := controlPlaneCPU(b)
	return cpuMeter{a - m.api, e - m.etcd}
}

// plus adds two spans of CPU time.
func (m cpuMeter) plus(o cpuMeter) cpuMeter { return cpuMeter{m.api + o.api, m.etcd + o.etcd} }

// spanPerOp returns the milliseconds per operation of a span of CPU time (since's).
func (m cpuMeter) spanPerOp(ops int) (api, etcd float64) {
	return float64(m.api.Microseconds()) / 1000 / float64(ops), float64(m.etcd.Microseconds()) / 1000 / float64(ops)
}

// perOp returns the API server's and etcd's CPU milliseconds per operation since m.
func (m cpuMeter) perOp(b *testing.B, ops int) (api, etcd float64) {
	a, e := controlPlaneCPU(b)
	return float64((a - m.api).Microseconds()) / 1000 / float64(ops), float64((e - m.etcd).Microseconds()) / 1000 / float64(ops)
}
