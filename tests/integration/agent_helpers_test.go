package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/pkg/agent"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// testAgent is an in-process ipkeeper-agent for one simulated node, reached
// through its real unix socket and wire protocol.
type testAgent struct {
	node   string
	socket string
	agent  *agent.Agent
	client *cniproto.Client
}

// startAgent runs an agent with its own caches, as on a separate node.
func startAgent(t testing.TB, node string) *testAgent {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipk-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agent.sock")
	logOut := io.Discard
	if testing.Verbose() && os.Getenv("IPKEEPER_AGENT_LOGS") != "" {
		logOut = os.Stderr
	}
	a, err := agent.New(cp.Config, agent.Options{
		NodeName:   node,
		SocketPath: socket,
		Logger:     slog.New(slog.NewTextHandler(logOut, nil)).With("agent", node),
	})
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
	if err := framework.Eventually(ctx, 60*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("agent exited: %w", err)
		default:
		}
		return a.Ready(), nil
	}); err != nil {
		t.Fatalf("agent %s not ready: %v", node, err)
	}
	return &testAgent{node: node, socket: socket, agent: a, client: &cniproto.Client{SocketPath: socket, Timeout: 60 * time.Second}}
}

// createPods creates n pods bound to node (no kubelet runs: they stay Pending).
func createPods(t testing.TB, ns, node, prefix string, n int) []*corev1.Pod {
	t.Helper()
	pods := make([]*corev1.Pod, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: ns},
				Spec: corev1.PodSpec{
					NodeName:   node,
					Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}},
				},
			}
			if err := cp.Client.Create(context.Background(), p); err != nil {
				errs <- err
				return
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating pods: %v", err)
	}
	return pods
}

func podArgs(p *corev1.Pod) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s;K8S_POD_INFRA_CONTAINER_ID=%s",
		p.Namespace, p.Name, p.UID, sandboxID(p))
}

func sandboxID(p *corev1.Pod) string { return "sandbox-" + string(p.UID) }

// netConf renders a network configuration with an ipkeeper ipam section.
func netConf(network string, ipam map[string]any) json.RawMessage {
	ipam["type"] = "ipkeeper"
	b, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network, "type": "bridge", "ipam": ipam})
	if err != nil {
		panic(err)
	}
	return b
}

func (a *testAgent) add(ctx context.Context, p *corev1.Pod, ifName string, conf json.RawMessage) (*types100.Result, error) {
	resp, err := a.client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: sandboxID(p), Netns: "/var/run/netns/" + p.Name,
		IfName: ifName, Args: podArgs(p), Config: conf,
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

func (a *testAgent) del(ctx context.Context, p *corev1.Pod, containerID, ifName string, conf json.RawMessage) error {
	_, err := a.client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdDel, ContainerID: containerID, IfName: ifName, Args: podArgs(p), Config: conf,
	})
	return err
}

func resultIPs(t testing.TB, res *types100.Result) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, ipc := range res.IPs {
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			t.Fatalf("bad IP in result: %v", ipc.Address)
		}
		out = append(out, a.Unmap())
	}
	return out
}

// reservationsOf lists a network's reservations, live.
func reservationsOf(t testing.TB, network string) []ipkeeperv1alpha1.IPReservation {
	t.Helper()
	var list ipkeeperv1alpha1.IPReservationList
	if err := cp.Client.List(context.Background(), &list, client.MatchingFields{"spec.network": network}); err != nil {
		t.Fatalf("listing reservations: %v", err)
	}
	return list.Items
}

func cniCode(err error) uint {
	if ce, ok := err.(*types.Error); ok { //nolint:errorlint // the client returns it unwrapped
		return ce.Code
	}
	return 0
}

func mustContain(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got success", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q lacks %q", err, p)
		}
	}
}

func keyOf(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
