// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// runAsPluginEnv makes the test binary behave like cmd/ipkeeper, so the
// exec tests cover skel's env/stdin/stdout/exit-code handling without
// building a separate binary.
const runAsPluginEnv = "IPKEEPER_TEST_RUN_AS_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsPluginEnv) == "1" {
		Main("ipkeeper test")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// execPlugin runs the plugin like a runtime would and returns its stdout
// and exit code.
func execPlugin(t *testing.T, command string, stdin []byte, extraEnv ...string) ([]byte, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{
		runAsPluginEnv + "=1",
		"GORACE=atexit_sleep_ms=0", // -race otherwise delays every exit by 1s
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=cid-1",
		"CNI_NETNS=/var/run/netns/does-not-exist",
		"CNI_IFNAME=net1",
		"CNI_PATH=/opt/cni/bin",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0",
	}, extraEnv...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running plugin: %v", err)
	}
	if stderr.Len() > 0 {
		t.Logf("plugin stderr: %s", stderr.String())
	}
	return stdout.Bytes(), cmd.ProcessState.ExitCode()
}

func TestExecAdd(t *testing.T) {
	agent := &fakeAgent{result: testResult(t)}
	sock := startAgent(t, agent)
	stdin := []byte(`{"cniVersion":"0.4.0","name":"net-a","type":"macvlan","ipam":{"type":"ipkeeper"}}`)
	out, code := execPlugin(t, "ADD", stdin, cniprotoEnv(sock))
	if code != 0 {
		t.Fatalf("ADD exited %d: %s", code, out)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct{ Address string }
	}
	if err := json.Unmarshal(out, &res); err != nil || res.CNIVersion != "0.4.0" || len(res.IPs) != 2 {
		t.Fatalf("ADD printed %s (%v)", out, err)
	}
	if req := agent.last(t); req.Args != "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0" {
		t.Fatalf("agent got CNI_ARGS %q", req.Args)
	}
}

func TestExecDelAgentDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	stdin := []byte(`{"cniVersion":"1.1.0","name":"net-a","type":"bridge","ipam":{"type":"ipkeeper"}}`)
	out, code := execPlugin(t, "DEL", stdin, cniprotoEnv(sock))
	var ce types.Error
	if err := json.Unmarshal(out, &ce); err != nil {
		t.Fatalf("DEL printed %s: %v", out, err)
	}
	if code == 0 || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "not reachable at "+sock) {
		t.Fatalf("DEL with agent down: exit %d, %+v", code, ce)
	}
}

func TestExecVersion(t *testing.T) {
	out, code := execPlugin(t, "VERSION", nil)
	var v struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out, &v); err != nil || code != 0 ||
		strings.Join(v.SupportedVersions, ",") != "0.3.1,0.4.0,1.0.0,1.1.0" {
		t.Fatalf("VERSION: exit %d, %s (%v)", code, out, err)
	}
}

func cniprotoEnv(sock string) string { return "IPKEEPER_AGENT_SOCKET=" + sock }

// TestExecMissingCNIVersion: the CNI library reads a missing cniVersion as
// the legacy "0.1.0" and would report `config is "0.1.0"`, a version nobody
// wrote; the error must say what is wrong and what to write.
func TestExecMissingCNIVersion(t *testing.T) {
	agent := &fakeAgent{result: testResult(t)}
	sock := startAgent(t, agent)
	stdin := []byte(`{"name":"net-a","type":"macvlan","ipam":{"type":"ipkeeper"}}`)
	for _, command := range []string{"ADD", "DEL", "CHECK"} {
		out, code := execPlugin(t, command, stdin, cniprotoEnv(sock))
		var ce types.Error
		if err := json.Unmarshal(out, &ce); err != nil {
			t.Fatalf("%s printed %s: %v", command, out, err)
		}
		text := ce.Msg + "; " + ce.Details
		if code == 0 || ce.Code != types.ErrInvalidNetworkConfig ||
			!strings.Contains(text, "cniVersion is missing") || !strings.Contains(text, `"1.1.0"`) || strings.Contains(text, "0.1.0") {
			t.Errorf("%s without cniVersion: exit %d, code %d, message %q", command, code, ce.Code, text)
		}
	}
	// An explicit but unsupported version is still reported as such.
	out, code := execPlugin(t, "ADD", []byte(`{"cniVersion":"0.2.0","name":"net-a","type":"macvlan","ipam":{"type":"ipkeeper"}}`), cniprotoEnv(sock))
	var ce types.Error
	if err := json.Unmarshal(out, &ce); err != nil || code == 0 || ce.Code != types.ErrIncompatibleCNIVersion || !strings.Contains(ce.Details, `"0.2.0"`) {
		t.Errorf("ADD with cniVersion 0.2.0: exit %d, %s", code, out)
	}
}
