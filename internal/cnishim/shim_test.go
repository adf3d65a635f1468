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

	"github.com/ipkeeper/ipkeeper/internal/cniproto"
)

func conf(cniVersion, sock string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"net-a","type":"bridge",`+
		`"ipam":{"type":"ipkeeper","socketPath":%q,"pool":"blue"}}`, cniVersion, sock))
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
	sock := startAgent(t, agent)
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			var out bytes.Buffer
			p := &Plugin{Stdout: &out}
			if err := p.Add(cmdArgs(conf(v, sock))); err != nil {
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
	if !jsonEqual(t, req.Config, conf("1.1.0", sock)) {
		t.Fatalf("agent got config %s", req.Config)
	}
	req.Config = nil
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("agent got %+v, want %+v", req, want)
	}
}

func TestDel(t *testing.T) {
	agent := &fakeAgent{}
	sock := startAgent(t, agent)
	args := cmdArgs(conf("1.1.0", sock))
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
	sock := startAgent(t, agent)
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net-a","ipam":{"type":"ipkeeper","socketPath":%q},`+
		`"cni.dev/valid-attachments":[{"containerID":"c9","ifname":"net1"}]}`, sock))
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
		err := tc.call(cmdArgs(conf("1.1.0", sock)))
		ce := asCNIError(t, err)
		want := "ipkeeper-agent is not reachable at " + sock + ": dial unix " + sock + ": connect: no such file or directory"
		if ce.Code != tc.code || !strings.HasPrefix(ce.Msg, want) || !strings.Contains(ce.Msg, "DaemonSet") {
			t.Errorf("%s with agent down: %+v, want code %d and message starting %q", tc.name, ce, tc.code, want)
		}
	}
}

func TestStatusNotReady(t *testing.T) {
	sock := startAgent(t, &fakeAgent{statusErr: errors.New("waiting for IPPool informer to sync")})
	ce := asCNIError(t, (&Plugin{}).Status(cmdArgs(conf("1.1.0", sock))))
	if ce.Code != 50 || !strings.Contains(ce.Msg, "IPPool informer") {
		t.Fatalf("STATUS not ready: %+v, want code 50 with the agent's reason", ce)
	}

	sock = startAgent(t, &fakeAgent{})
	if err := (&Plugin{}).Status(cmdArgs(conf("1.1.0", sock))); err != nil {
		t.Fatalf("STATUS ready: %v", err)
	}
}

func TestCNIErrorPassthrough(t *testing.T) {
	want := types.NewError(types.ErrInvalidNetworkConfig, `ipam: pool "blue" not found`, "IPPool blue does not exist")
	sock := startAgent(t, &fakeAgent{err: want})
	var out bytes.Buffer
	ce := asCNIError(t, (&Plugin{Stdout: &out}).Add(cmdArgs(conf("1.0.0", sock))))
	if *ce != *want {
		t.Fatalf("got %+v, want %+v", ce, want)
	}
	if out.Len() != 0 {
		t.Fatalf("failed ADD printed %q", out.String())
	}
}

func TestRequestTooLarge(t *testing.T) {
	agent := &fakeAgent{}
	sock := startAgent(t, agent)
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"ipkeeper","socketPath":%q},"pad":%q}`,
		sock, strings.Repeat("x", 1<<20)))
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
		{"config wins", `{"ipam":{"socketPath":"/a.sock"}}`, "/b.sock", "/a.sock", ""},
		{"env", `{"ipam":{"type":"ipkeeper"}}`, "/b.sock", "/b.sock", ""},
		{"default", `{"cniVersion":"1.0.0"}`, "", cniproto.DefaultSocketPath, ""},
		{"relative config", `{"ipam":{"socketPath":"agent.sock"}}`, "", "", `ipam.socketPath "agent.sock" must be an absolute path`},
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
