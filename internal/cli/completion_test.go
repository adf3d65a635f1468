// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// completion bash is cobra's bash script for the binary: it defines the
// completion function and registers it for kubectl-ipkeeper.
func TestCompletionBash(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"completion", "bash"}, Streams{Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	script := out.String()
	for _, want := range []string{"# bash completion V2 for kubectl-ipkeeper", "__start_kubectl-ipkeeper()", "complete -o default -F __start_kubectl-ipkeeper kubectl-ipkeeper"} {
		if !strings.Contains(script, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
}

// Every shell has a script; an unknown shell is a usage error naming it.
func TestCompletionShells(t *testing.T) {
	for _, shell := range completionShells {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), []string{"completion", shell}, Streams{Out: &out, Err: &errOut}); code != ExitOK || !strings.Contains(out.String(), "kubectl-ipkeeper") {
			t.Errorf("completion %s: exit %d, %d bytes naming the binary: %v; stderr %q", shell, code, out.Len(), strings.Contains(out.String(), "kubectl-ipkeeper"), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"completion", "tcsh"}, Streams{Out: &out, Err: &errOut}); code != ExitUsage || !strings.Contains(errOut.String(), `shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, stderr %q; want %d naming the shell", code, errOut.String(), ExitUsage)
	}
}

// __complete is cobra's completion protocol, which kubectl's plugin
// completion (kubectl_complete-ipkeeper) calls: why completes its kinds,
// -o its formats.
func TestCompleteProtocol(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "why", ""}, "vm/\n"},
		{[]string{"__complete", "pools", "-o", ""}, "custom-columns=\n"},
		{[]string{"__complete", "wh"}, "who-has\t"},
	} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), tt.args, Streams{Out: &out, Err: &errOut}); code != ExitOK || !strings.Contains(out.String(), tt.want) {
			t.Errorf("%q: exit %d, stdout %q; want %q", tt.args, code, out.String(), tt.want)
		}
	}
}
