// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

func conf(cniVersion string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"net-a","type":"bridge",`+
		`"ipam":{"type":"ipkeeper","pool":"blue"}}`, cniVersion))
}

func cmdArgs(stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{
		ContainerID: "cid-1", Netns: "/var/run/netns/p1", IfName: "net1", Path: "/opt/cni/bin",
		Args:      "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u1",
		StdinData: stdin,
	}
}

func testResult(t *testing.T) *types100.Result {
	t.Helper()
	ip4, n4, _ := net.ParseCIDR("10.20.0.5/24")
	ip6, n6, _ := net.ParseCIDR("fd00::5/64")
	n4.IP, n6.IP = ip4, ip6
	return &types100.Result{ // CNIVersion left empty: the server must fill in 1.1.0
		IPs: []*types100.IPConfig{
			{Address: *n4, Gateway: net.ParseIP("10.20.0.1")},
			{Address: *n6},
		},
		DNS: types.DNS{Nameservers: []string{"10.20.0.53"}},
	}
}

func TestAddConvertsResult(t *testing.T) {
	agent := &fakeAgent{result: testResult(t)}
	startAgent(t, agent)
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			var out bytes.Buffer
			p := &Plugin{Stdout: &out}
			if err := p.Add(cmdArgs(conf(v))); err != nil {
				t.Fatalf("Add: %v", err)
			}
			var got struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []struct {
					Version string `json:"version"` // only in 0.x results
					Address string `json:"address"`
					Gateway string `json:"gateway"`
				} `json:"ips"`
				DNS struct{ Nameservers []string } `json:"dns"`
			}
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("printed result is not JSON: %v\n%s", err, out.String())
			}
			// 0.x results tag each IP with its family; 1.x dropped that field.
			wantIPVersion := [2]string{}
			if strings.HasPrefix(v, "0.") {
				wantIPVersion = [2]string{"4", "6"}
			}
			if got.CNIVersion != v || len(got.IPs) != 2 ||
				got.IPs[0].Address != "10.20.0.5/24" || got.IPs[0].Gateway != "10.20.0.1" || got.IPs[1].Address != "fd00::5/64" ||
				got.IPs[0].Version != wantIPVersion[0] || got.IPs[1].Version != wantIPVersion[1] ||
				len(got.DNS.Nameservers) != 1 {
				t.Fatalf("printed result for %s:\n%s", v, out.String())
			}
		})
	}
	req := agent.last(t)
	want := cniproto.Request{Command: "ADD", ContainerID: "cid-1", Netns: "/var/run/netns/p1", IfName: "net1",
		Path: "/opt/cni/bin", Args: cmdArgs(nil).Args}
	if !jsonEqual(t, req.Config, conf("1.1.0")) {
		t.Fatalf("agent got config %s", req.Config)
	}
	req.Config = nil
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("agent got %+v, want %+v", req, want)
	}
}

func TestDel(t *testing.T) {
	agent := &fakeAgent{}
	startAgent(t, agent)
	args := cmdArgs(conf("1.1.0"))
	args.Netns = "" // the namespace may already be gone
	var out bytes.Buffer
	if err := (&Plugin{Stdout: &out}).Del(args); err != nil {
		t.Fatalf("Del: %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("DEL printed %q, want nothing", out.String())
	}
	if req := agent.last(t); req.Command != cniproto.CmdDel || req.ContainerID != "cid-1" || req.IfName != "net1" {
		t.Fatalf("agent got %+v", req)
	}
}

func TestCheckAndGCForwardConfig(t *testing.T) {
	agent := &fakeAgent{}
	startAgent(t, agent)
	stdin := []byte(`{"cniVersion":"1.1.0","name":"net-a","ipam":{"type":"ipkeeper"},` +
		`"cni.dev/valid-attachments":[{"containerID":"c9","ifname":"net1"}]}`)
	p := &Plugin{}
	if err := p.GC(&skel.CmdArgs{Path: "/opt/cni/bin", StdinData: stdin}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if req := agent.last(t); req.Command != cniproto.CmdGC || !jsonEqual(t, req.Config, stdin) {
		t.Fatalf("agent got %+v (config %s)", req, req.Config)
	}
	if err := p.Check(cmdArgs(stdin)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if req := agent.last(t); req.Command != cniproto.CmdCheck {
		t.Fatalf("agent got %+v", req)
	}
}

func TestAgentDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	t.Setenv(cniproto.SocketPathEnv, sock)
	p := &Plugin{}
	for _, tc := range []struct {
		name string
		call func(*skel.CmdArgs) error
		code uint
	}{
		{"ADD", p.Add, types.ErrTryAgainLater},
		{"DEL", p.Del, types.ErrTryAgainLater},
		{"STATUS", p.Status, cniproto.ErrPluginNotAvailable},
	} {
		err := tc.call(cmdArgs(conf("1.1.0")))
		ce := asCNIError(t, err)
		want := "ipkeeper-agent is not reachable at " + sock + ": dial unix " + sock + ": connect: no such file or directory"
		if ce.Code != tc.code || !strings.HasPrefix(ce.Msg, want) || !strings.Contains(ce.Msg, "DaemonSet") {
			t.Errorf("%s with agent down: %+v, want code %d and message starting %q", tc.name, ce, tc.code, want)
		}
	}
}

func TestStatusNotReady(t *testing.T) {
	startAgent(t, &fakeAgent{statusErr: errors.New("waiting for IPPool informer to sync")})
	ce := asCNIError(t, (&Plugin{}).Status(cmdArgs(conf("1.1.0"))))
	if ce.Code != 50 || !strings.Contains(ce.Msg, "IPPool informer") {
		t.Fatalf("STATUS not ready: %+v, want code 50 with the agent's reason", ce)
	}

	startAgent(t, &fakeAgent{})
	if err := (&Plugin{}).Status(cmdArgs(conf("1.1.0"))); err != nil {
		t.Fatalf("STATUS ready: %v", err)
	}
}

func TestCNIErrorPassthrough(t *testing.T) {
	want := types.NewError(types.ErrInvalidNetworkConfig, `ipam: pool "blue" not found`, "IPPool blue does not exist")
	startAgent(t, &fakeAgent{err: want})
	var out bytes.Buffer
	ce := asCNIError(t, (&Plugin{Stdout: &out}).Add(cmdArgs(conf("1.0.0"))))
	if *ce != *want {
		t.Fatalf("got %+v, want %+v", ce, want)
	}
	if out.Len() != 0 {
		t.Fatalf("failed ADD printed %q", out.String())
	}
}

func TestRequestTooLarge(t *testing.T) {
	agent := &fakeAgent{}
	startAgent(t, agent)
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"ipkeeper"},"pad":%q}`,
		strings.Repeat("x", 1<<20)))
	ce := asCNIError(t, (&Plugin{}).Add(cmdArgs(stdin)))
	if ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "1 MiB") {
		t.Fatalf("got %+v, want code 7 naming the 1 MiB limit", ce)
	}
	if agent.count() != 0 {
		t.Fatal("oversized request reached the agent")
	}
}

func TestAgentSocketModes(t *testing.T) {
	sock := startAgent(t, &fakeAgent{})
	for path, want := range map[string]fs.FileMode{sock: 0o600, filepath.Dir(sock): 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %v, want %v", path, got, want)
		}
	}
}

func TestSocketPathPrecedence(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == cniproto.SocketPathEnv {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name, stdin, env, want, wantErr string
	}{
		{"config is not the node's", `{"ipam":{"socketPath":"/a.sock"}}`, "/b.sock", "", `ipam.socketPath "/a.sock" is not this node's agent socket "/b.sock"`},
		{"config names the node's", `{"ipam":{"socketPath":"/b.sock"}}`, "/b.sock", "/b.sock", ""},
		{"env", `{"ipam":{"type":"ipkeeper"}}`, "/b.sock", "/b.sock", ""},
		{"default", `{"cniVersion":"1.0.0"}`, "", cniproto.DefaultSocketPath, ""},
		{"relative config", `{"ipam":{"socketPath":"agent.sock"}}`, "", "", `ipam.socketPath "agent.sock" is not this node's agent socket`},
		{"relative env", `{}`, "x.sock", "", `IPKEEPER_AGENT_SOCKET "x.sock" must be an absolute path`},
	} {
		c, err := parseConf([]byte(tc.stdin))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := c.socketPath(env(tc.env))
		if tc.wantErr != "" {
			if ce := asCNIError(t, err); ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, tc.wantErr) {
				t.Errorf("%s: error %+v, want %q", tc.name, ce, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: socketPath = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func asCNIError(t *testing.T, err error) *types.Error {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error = %v (%T), want *types.Error", err, err)
	}
	return ce
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// The root shim dials only the node's socket: a network definition (which
// any namespace user with NAD rights writes) naming another path is a
// configuration error, and nothing is dialled or created there.
func TestSocketPathComesFromTheNodeOnly(t *testing.T) {
	agent := &fakeAgent{}
	sock := startAgent(t, agent)
	elsewhere := filepath.Join(t.TempDir(), "chosen-by-the-nad.sock")
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net-a","ipam":{"type":"ipkeeper","socketPath":%q}}`, elsewhere))
	p := &Plugin{Getenv: func(k string) string {
		if k == cniproto.SocketPathEnv {
			return sock
		}
		return ""
	}}
	for _, call := range []struct {
		name string
		f    func(*skel.CmdArgs) error
	}{{"ADD", p.Add}, {"DEL", p.Del}, {"CHECK", p.Check}} {
		ce := asCNIError(t, call.f(cmdArgs(stdin)))
		if ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "ipam.socketPath") || !strings.Contains(ce.Msg, elsewhere) {
			t.Errorf("%s with ipam.socketPath %s: %+v, want code 7 naming the field and the value", call.name, elsewhere, ce)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(elsewhere)); len(entries) != 0 {
		t.Errorf("the shim created %v where the NAD pointed", entries)
	}
	if agent.count() != 0 {
		t.Errorf("the node's agent got %d requests of a refused config", agent.count())
	}
	// The node's own path, written out in the NAD, is no choice: it works.
	same := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net-a","ipam":{"type":"ipkeeper","socketPath":%q}}`, sock))
	if err := p.Del(cmdArgs(same)); err != nil {
		t.Errorf("DEL naming the node's own socket: %v", err)
	}
}

// A config whose ipam (or cniVersion) has the wrong JSON type is a
// configuration error naming the field and what it got, never a Go type.
func TestConfigOfTheWrongShape(t *testing.T) {
	for _, tc := range []struct{ stdin, want string }{
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":"ipkeeper"}`, `ipam: expected an object, got JSON string "ipkeeper"`},
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"ipkeeper","socketPath":7}}`, "ipam.socketPath: expected a string, got JSON number 7"},
		{`{"cniVersion":1,"name":"n","type":"bridge","ipam":{"type":"ipkeeper"}}`, "cniVersion: expected a string, got JSON number 1"},
	} {
		_, err := parseConf([]byte(tc.stdin))
		ce := asCNIError(t, err)
		if ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, tc.want) || strings.Contains(ce.Msg, "Go ") {
			t.Errorf("%s: %+v, want code 7 saying %q", tc.stdin, ce, tc.want)
		}
	}
	if ce := asCNIError(t, func() error { _, err := parseConf([]byte(`{`)); return err }()); ce.Code != types.ErrDecodingFailure {
		t.Errorf("stdin that is not JSON: %+v, want code 6", ce)
	}
}
