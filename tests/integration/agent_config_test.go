// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestAddRefusesWhatTheAPIServerWouldRefuse: configurations whose
// reservations the API server would refuse (the IPReservation CRD's schema
// and CEL rules) fail as configuration errors (code 7) naming the field,
// not as internal errors on every retried ADD, and leave no reservation.
func TestAddRefusesWhatTheAPIServerWouldRefuse(t *testing.T) {
	ctx := context.Background()
	a := cp.StartAgent(t, "node-conf")
	ns := cp.NewNamespace(t, "conf")
	pod := cp.CreatePods(t, ns, a.Node, "p", 1)[0]

	conf := func(name string, top map[string]any, ipam map[string]any) json.RawMessage {
		c := map[string]any{"cniVersion": "1.1.0", "name": name, "type": "bridge", "ipam": ipam}
		for k, v := range top {
			c[k] = v
		}
		ipam["type"] = "ipkeeper"
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	longName := strings.Repeat("n", ipkeeperv1alpha1.NetworkMaxLength+1)
	tests := []struct {
		name    string
		network string
		conf    json.RawMessage
		want    []string // the field and the value at least
	}{
		{"IPv4-mapped IPv6 range", "conf-mapped",
			conf("conf-mapped", nil, map[string]any{"range": "::ffff:10.0.0.0/120"}),
			[]string{"ipam.range", `"::ffff:10.0.0.0/120"`, `write it as IPv4 "10.0.0.0/24"`}},
		{"IPv6 range reaching into the IPv4-mapped block", "conf-mapped-block",
			conf("conf-mapped-block", nil, map[string]any{"range": "::fffe:0:0/95"}),
			[]string{"ipam.range", `"::fffe:0:0/95"`, "::ffff:0:0/96"}},
		{"IPv4-mapped static IP", "conf-mapped-static",
			conf("conf-mapped-static", map[string]any{"runtimeConfig": map[string]any{"ips": []string{"::ffff:10.62.0.5"}}}, map[string]any{"range": "10.62.0.0/24"}),
			[]string{"runtimeConfig.ips[0]", `"::ffff:10.62.0.5"`}},
		{"network name longer than IPReservation spec.network allows", longName,
			conf(longName, nil, map[string]any{"range": "10.63.0.0/24"}),
			[]string{"name", longName, fmt.Sprintf("at most %d", ipkeeperv1alpha1.NetworkMaxLength)}},
		// The claim reference of a wrong JSON type used to be printed as a Go map.
		{"claim reference that is not a string", "conf-claimref",
			conf("conf-claimref", map[string]any{"args": map[string]any{"cni": map[string]any{"ipam-claim-reference": map[string]any{"name": "vm1"}}}}, map[string]any{"range": "10.64.0.0/24"}),
			[]string{"args.cni.ipam-claim-reference", "expected a string, got JSON object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Add(ctx, pod, "net1", tt.conf)
			if err == nil {
				t.Fatalf("ADD succeeded")
			}
			if code := cniCode(err); code != types.ErrInvalidNetworkConfig {
				t.Errorf("ADD failed with code %d, want %d (invalid network config): %v", code, types.ErrInvalidNetworkConfig, err)
			}
			mustContain(t, err, tt.want...)
			if strings.Contains(err.Error(), "map[") {
				t.Errorf("error prints a Go value: %v", err)
			}
			if res := reservationsOf(t, tt.network); len(res) != 0 {
				t.Errorf("%d reservations left for network %.40q", len(res), tt.network)
			}
		})
	}
}

// TestReservationRulesAgreeWithAPIServer checks the Go side of the CRD's
// rules against the real API server: what ValidateIP and ipamconfig.Parse
// accept, a reservation create accepts (dry run), and the limits they
// enforce are real.
func TestReservationRulesAgreeWithAPIServer(t *testing.T) {
	ctx := context.Background()
	create := func(network string, ip netip.Addr) error {
		r := &ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{
				Name:   naming.Reservation(network, ip),
				Labels: map[string]string{naming.NetworkLabel: naming.NetworkLabelValue(network)},
			},
			Spec: ipkeeperv1alpha1.IPReservationSpec{
				Network: network, Pool: naming.InlinePool(network), IP: ip.String(), // as the agent writes it
				Owner:         ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "pod", UID: "uid-1"},
				InterfaceName: "net1", ContainerID: "c", Node: "node-1",
			},
		}
		return cp.Client.Create(ctx, r, client.DryRunAll)
	}

	for _, s := range []string{"10.0.0.1", "0.0.0.0", "255.255.255.255", "fd00::1", "::", "::1", "::a00:1",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fd00:0:0:1::", "::ffff:10.0.0.1", "::ffff:0.0.0.0", "fe80::1%eth0"} {
		ip := netip.MustParseAddr(s)
		goErr, serverErr := ipkeeperv1alpha1.ValidateIP(ip), create("agree", ip)
		if (goErr == nil) != (serverErr == nil) {
			t.Errorf("IP %s: ValidateIP says %v, the API server says %v", s, goErr, serverErr)
		}
	}

	ip := netip.MustParseAddr("10.0.0.1")
	for _, network := range []string{
		strings.Repeat("n", ipkeeperv1alpha1.NetworkMaxLength),
		strings.Repeat("n", ipkeeperv1alpha1.NetworkMaxLength+1),
		"Blue_net-1.a", "a b", "blau-ü", "x/y", "-x",
	} {
		_, parseErr := ipamconfig.Parse(framework.NetConf(network, map[string]any{"range": "10.0.0.0/24"}))
		serverErr := create(network, ip)
		if parseErr == nil && serverErr != nil {
			t.Errorf("network %.40q (%d chars): Parse accepts it, the API server refuses: %v", network, len(network), serverErr)
		}
	}
	if create(strings.Repeat("n", ipkeeperv1alpha1.NetworkMaxLength+1), ip) == nil {
		t.Errorf("the API server accepts a network name longer than NetworkMaxLength; the limit is out of date")
	}
}

// TestAgentWaitsForTheReservationCRD: an agent started before the
// IPReservation CRD exists stays up, says what is missing and how to
// install it (log, /readyz, CNI STATUS, refused ADD), and becomes ready and
// serves ADDs once the CRD is installed, without a restart. It runs on a
// control plane of its own, started without that CRD.
func TestAgentWaitsForTheReservationCRD(t *testing.T) {
	ctx := context.Background()
	bare, err := framework.Start(ctx, framework.Options{WithoutControllerManager: true, SkipCRDs: []string{"ipkeeper.io_ipreservations.yaml"}})
	if err != nil {
		t.Fatalf("starting a control plane without the IPReservation CRD: %v", err)
	}
	t.Cleanup(func() {
		if err := bare.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})

	logs := &lockedBuffer{}
	probeAddr := freeLocalAddr(t)
	a := bare.LaunchAgent(t, "node-early", func(o *agent.Options) {
		var out io.Writer = logs
		if os.Getenv("IPKEEPER_AGENT_LOGS") != "" {
			out = io.MultiWriter(logs, os.Stderr)
		}
		o.Logger = logging.Text(out)
		o.ProbeAddr = probeAddr
	})
	conf := framework.NetConf("early-net", map[string]any{"range": "10.65.0.0/24"})
	status := func() error {
		_, err := a.Client.Do(ctx, cniproto.Request{Command: cniproto.CmdStatus, Config: conf})
		return err
	}
	readyz := func() (int, string, error) {
		resp, err := http.Get("http://" + probeAddr + "/readyz")
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}

	const why = "the IPReservation CRD (ipreservations.ipkeeper.io) is not installed"
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		if err := a.Exited(); err != nil {
			return false, err
		}
		code, body, err := readyz()
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, why) &&
			strings.Contains(logs.String(), "waiting for the IPReservation CRD"), nil
	}); err != nil {
		t.Fatalf("agent without the CRD: %v; logs:\n%s", err, logs.String())
	}
	if a.Agent.Ready() {
		t.Fatalf("agent ready without the IPReservation CRD")
	}
	if !strings.Contains(logs.String(), "kubectl apply --server-side -k manifests/, or -k manifests/overlays/existing-crds/") {
		t.Errorf("the log does not say how to install the CRD:\n%s", logs.String())
	}
	err = status()
	if cniCode(err) != cniproto.ErrPluginNotAvailable {
		t.Errorf("STATUS = %v (code %d), want code %d", err, cniCode(err), cniproto.ErrPluginNotAvailable)
	}
	mustContain(t, err, why)

	ns := bare.NewNamespace(t, "early")
	bare.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	pod := bare.CreatePods(t, ns, a.Node, "p", 1)[0]
	_, err = a.Add(ctx, pod, "net1", conf)
	if cniCode(err) != types.ErrTryAgainLater {
		t.Errorf("ADD before the CRD = %v (code %d), want code %d", err, cniCode(err), types.ErrTryAgainLater)
	}
	mustContain(t, err, why)

	// Installed the way the message says.
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := bare.Kubectl(ctx, nil, "apply", "--server-side", "-k", filepath.Join(root, "manifests", "crds")); err != nil {
		t.Fatalf("installing the CRDs: %v\n%s", err, out)
	}
	if err := framework.Eventually(ctx, 60*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		if err := a.Exited(); err != nil {
			return false, err
		}
		return a.Agent.Ready(), nil
	}); err != nil {
		t.Fatalf("agent not ready after the CRD was installed: %v; logs:\n%s", err, logs.String())
	}
	if code, body, err := readyz(); err != nil || code != http.StatusOK {
		t.Errorf("/readyz after the CRD was installed: %d %q %v", code, body, err)
	}
	if err := status(); err != nil {
		t.Errorf("STATUS after the CRD was installed: %v", err)
	}
	res, err := a.Add(ctx, pod, "net1", conf)
	if err != nil {
		t.Fatalf("ADD after the CRD was installed: %v", err)
	}
	ips := resultIPs(t, res)
	if len(ips) != 1 || !netip.MustParsePrefix("10.65.0.0/24").Contains(ips[0]) {
		t.Fatalf("ADD returned %v", ips)
	}
	var list ipkeeperv1alpha1.IPReservationList
	if err := bare.Client.List(ctx, &list); err != nil || len(list.Items) != 1 || list.Items[0].Spec.IP != ips[0].String() {
		t.Fatalf("reservations after the ADD: %v (%v)", list.Items, err)
	}
	if !strings.Contains(logs.String(), "the IPReservation CRD is installed") {
		t.Errorf("no log line says the CRD was found:\n%s", logs.String())
	}
}

// lockedBuffer collects an agent's logs for assertions.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeLocalAddr returns a loopback address with a port free a moment ago.
func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
