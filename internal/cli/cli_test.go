// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// The command line is checked before any API call, so these need no
// cluster; the commands themselves are tested against a real control
// plane in tests/integration (cli_*_test.go).
func TestMainCommandLine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err string
		// errEmpty: nothing on stderr (pflag prints the usage there itself).
		errEmpty bool
	}{
		{name: "no command", args: nil, code: ExitUsage, err: "Commands:"},
		{name: "help", args: []string{"--help"}, code: ExitOK, out: "who-has"},
		{name: "version", args: []string{"--version"}, code: ExitOK, out: "dev"},
		{name: "unknown command", args: []string{"frobnicate"}, code: ExitUsage, err: `unknown command "frobnicate"`},
		{name: "command help", args: []string{"who-has", "--help"}, code: ExitOK, out: "--network", errEmpty: true},
		{name: "unknown flag", args: []string{"pools", "--nope"}, code: ExitUsage, err: "unknown flag: --nope"},
		{name: "bad output", args: []string{"pools", "-o", "xml"}, code: ExitUsage, err: `-o "xml": pools accepts wide, json, yaml`},
		{name: "why has no wide", args: []string{"why", "pod/x", "-o", "wide"}, code: ExitUsage, err: "why accepts json, yaml"},
		{name: "-A and -n", args: []string{"leaks", "-A", "-n", "x"}, code: ExitUsage, err: "exclude each other"},
		{name: "kubeconfig missing", args: []string{"pools", "--kubeconfig", missing}, code: ExitError, err: "loading the kubeconfig"},
		// Bad arguments and -o values are found before the kubeconfig is
		// loaded, so a missing one does not hide them.
		{name: "no IP", args: []string{"who-has", "--kubeconfig", missing}, code: ExitUsage, err: "who-has takes one IP address, got 0 arguments"},
		{name: "bad IP", args: []string{"who-has", "10.1", "--kubeconfig", missing}, code: ExitUsage, err: `IP "10.1": not an IP address without zone`},
		{name: "unknown kind", args: []string{"why", "deployment/web", "--kubeconfig", missing}, code: ExitUsage, err: `"deployment/web": name the object as pod/NAME`},
		{name: "why vm without a name", args: []string{"why", "vm", "--kubeconfig", missing}, code: ExitUsage, err: "why vm takes one name, got 0 arguments"},
		{name: "why pods alias", args: []string{"why", "pods", "a", "b", "--kubeconfig", missing}, code: ExitUsage, err: "why pod takes one name, got 2 arguments"},
		{name: "leaks argument", args: []string{"leaks", "x", "--kubeconfig", missing}, code: ExitUsage, err: `leaks takes no arguments, got "x"`},
		{name: "import from", args: []string{"import", "calico", "--kubeconfig", missing}, code: ExitUsage, err: `got "calico"`},
		{name: "version argument", args: []string{"version", "x"}, code: ExitUsage, err: `version takes no arguments, got "x"`},
		{name: "bad jsonpath", args: []string{"pools", "-o", "jsonpath={.items[0", "--kubeconfig", missing}, code: ExitUsage, err: `-o "jsonpath={.items[0"`},
		{name: "no columns", args: []string{"pools", "-o", "custom-columns=", "--kubeconfig", missing}, code: ExitUsage, err: `-o "custom-columns=": custom-columns needs a template`},
		{name: "bad flag value", args: []string{"pools", "-A=maybe", "--kubeconfig", missing}, code: ExitUsage, err: `invalid argument "maybe" for "-A, --all-namespaces" flag`},
		{name: "why pod has no wide", args: []string{"why", "pod", "x", "-o", "wide", "--kubeconfig", missing}, code: ExitUsage, err: `-o "wide": why pod accepts json, yaml`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(context.Background(), tt.args, Streams{Out: &out, Err: &errOut})
			if code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, errOut.String())
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.out)
			}
			if tt.errEmpty && errOut.Len() > 0 {
				t.Errorf("stderr %q, want nothing", errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.err) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tt.err)
			}
		})
	}
}
