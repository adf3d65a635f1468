// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
)

// Agent is an in-process ipkeeper-agent standing for one node, with its own
// caches, reached through its real unix socket and wire protocol.
type Agent struct {
	Node     string
	Socket   string
	Agent    *agent.Agent
	Client   *cniproto.Client
	Registry *prometheus.Registry

	done chan error // receives Run's result
}

// StartAgent runs an agent for node until the test ends and waits until it
// is ready. Its logs go to stderr when IPKEEPER_AGENT_LOGS is set.
func (cp *ControlPlane) StartAgent(t testing.TB, node string, tweaks ...func(*agent.Options)) *Agent {
	t.Helper()
	a := cp.LaunchAgent(t, node, tweaks...)
	if err := Eventually(context.Background(), 60*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		if err := a.Exited(); err != nil {
			return false, err
		}
		return a.Agent.Ready(), nil
	}); err != nil {
		t.Fatalf("agent %s not ready: %v", node, err)
	}
	return a
}

// LaunchAgent runs an agent for node until the test ends without waiting
// for it to become ready, for tests of start-up itself.
func (cp *ControlPlane) LaunchAgent(t testing.TB, node string, tweaks ...func(*agent.Options)) *Agent {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipk-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agent.sock")
	logOut := io.Discard
	if os.Getenv("IPKEEPER_AGENT_LOGS") != "" {
		logOut = os.Stderr
	}
	reg := prometheus.NewRegistry()
	opts := agent.Options{
		NodeName:   node,
		SocketPath: socket,
		Registry:   reg,
		Logger:     logging.Text(logOut).WithValues("agent", node),
	}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	a, err := agent.New(cp.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %s: %v", node, err)
		}
	})
	return &Agent{Node: node, Socket: socket, Agent: a, Registry: reg, done: done,
		Client: &cniproto.Client{SocketPath: socket, Timeout: 60 * time.Second}}
}

// Exited returns the error the agent stopped with, or nil while it runs.
func (a *Agent) Exited() error {
	select {
	case err := <-a.done:
		a.done <- err // keep it for the cleanup
		return fmt.Errorf("agent exited: %w", err)
	default:
		return nil
	}
}

// CreatePods creates n pods named prefix-i bound to node. No kubelet runs:
// they stay Pending, which is all the IPAM needs (it checks they exist).
func (cp *ControlPlane) CreatePods(t testing.TB, ns, node, prefix string, n int) []*corev1.Pod {
	t.Helper()
	return cp.CreateAnnotatedPods(t, ns, node, prefix, n, nil)
}

// CreateAnnotatedPods is CreatePods with annotations set at creation, as a
// mutating webhook would have them.
func (cp *ControlPlane) CreateAnnotatedPods(t testing.TB, ns, node, prefix string, n int, annotations map[string]string) []*corev1.Pod {
	t.Helper()
	pods := make([]*corev1.Pod, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 32)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: ns, Annotations: annotations},
				Spec: corev1.PodSpec{
					NodeName:   node,
					Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}},
				},
			}
			if err := cp.Client.Create(context.Background(), p); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("creating %d pods: %d failed, first: %v", n, len(errs), errs[0])
	}
	return pods
}

// PodArgs renders the CNI_ARGS a runtime passes for p.
func PodArgs(p *corev1.Pod) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s;K8S_POD_INFRA_CONTAINER_ID=%s",
		p.Namespace, p.Name, p.UID, SandboxID(p))
}

// SandboxID is the container ID tests use for p's sandbox.
func SandboxID(p *corev1.Pod) string { return "sandbox-" + string(p.UID) }

// NetConf renders a network configuration whose ipam section is ipkeeper with the given keys.
func NetConf(network string, ipam map[string]any) json.RawMessage {
	ipam["type"] = "ipkeeper"
	b, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network, "type": "bridge", "ipam": ipam})
	if err != nil {
		panic(err) // maps of plain values always marshal
	}
	return b
}

// Add sends a CNI ADD for p's sandbox.
func (a *Agent) Add(ctx context.Context, p *corev1.Pod, ifName string, conf json.RawMessage) (*types100.Result, error) {
	resp, err := a.Client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: SandboxID(p), Netns: "/var/run/netns/" + p.Name,
		IfName: ifName, Args: PodArgs(p), Config: conf,
	})
	if err != nil {
		return nil, err
	}
	res := &types100.Result{}
	if err := json.Unmarshal(resp.Result, res); err != nil {
		return nil, fmt.Errorf("decoding result %s: %w", resp.Result, err)
	}
	return res, nil
}

// Del sends a CNI DEL for the attachment of p in sandbox containerID.
func (a *Agent) Del(ctx context.Context, p *corev1.Pod, containerID, ifName string, conf json.RawMessage) error {
	_, err := a.Client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdDel, ContainerID: containerID, IfName: ifName, Args: PodArgs(p), Config: conf,
	})
	return err
}

// CounterSum sums a counter family from the agent's metrics.
func (a *Agent) CounterSum(name string) float64 { return a.CounterWhere(name, "", "") }

// CounterWhere sums the series of a counter family whose label has value
// (every series when label is empty).
func (a *Agent) CounterWhere(name, label, value string) float64 {
	return CounterWhere(a.Registry, name, label, value)
}

// Gauge returns the value of an unlabelled gauge from the agent's metrics.
func (a *Agent) Gauge(name string) float64 { return Gauge(a.Registry, name) }

// CounterWhere sums the series of a counter family in g whose label has
// value (every series when label is empty); 0 when g cannot be gathered.
func CounterWhere(g prometheus.Gatherer, name, label, value string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || hasLabel(m.GetLabel(), label, value) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func hasLabel(pairs []*dto.LabelPair, name, value string) bool {
	for _, p := range pairs {
		if p.GetName() == name && p.GetValue() == value {
			return true
		}
	}
	return false
}

// Gauge returns the value of an unlabelled gauge in g.
func Gauge(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}
