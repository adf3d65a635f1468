// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ChartDir is the Helm chart's directory in the checkout at root.
func ChartDir(root string) string { return filepath.Join(root, "charts", "ipkeeper") }

// Helm runs the pinned helm with args and returns its standard output.
// Helm's cache, configuration and data go to a temporary directory, never
// the user's home; kubeconfig, when set, is passed as --kubeconfig. The
// error carries standard error.
func Helm(ctx context.Context, tools *Tools, kubeconfig string, args ...string) ([]byte, error) {
	if err := requireExecutables(tools.Helm); err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "ipkeeper-helm-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(home) }()
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	cmd := exec.CommandContext(ctx, tools.Helm, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.Bytes(), stdout.Bytes())
	}
	return stdout.Bytes(), nil
}

// DecodeObjects decodes a multi-document YAML stream (helm template,
// kubectl kustomize) into objects, as JSON-shaped maps; empty documents
// are skipped.
func DecodeObjects(data []byte) ([]map[string]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("decoding %q: %w", firstLine(doc), err)
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			return nil, fmt.Errorf("decoding %q: %w", firstLine(doc), err)
		}
		if len(obj) > 0 {
			objs = append(objs, obj)
		}
	}
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}
