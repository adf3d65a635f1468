// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestFileNameIsKubeconformsTemplate(t *testing.T) {
	for _, tc := range []struct{ group, version, kind, want string }{
		{"", "v1", "Service", "service-v1.json"},
		{"apps", "v1", "Deployment", "deployment-apps-v1.json"},
		{"admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicy-admissionregistration-v1.json"},
		{"ipkeeper.io", "v1alpha1", "IPPool", "ippool-ipkeeper-v1alpha1.json"},
		{"monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrule-monitoring-v1.json"},
	} {
		if got := fileName(tc.group, tc.version, tc.kind); got != tc.want {
			t.Errorf("fileName(%q, %q, %q) = %q, want %q", tc.group, tc.version, tc.kind, got, tc.want)
		}
	}
}

// swagger is a small swagger document: a kind whose spec refers to a
// type that contains itself, an int-or-string, a Quantity and ObjectMeta.
const swagger = `{"definitions": {
  "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {"name": {"type": "string"}}},
  "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
  "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
  "x.v1.Node": {"type": "object", "description": "dropped", "properties": {
    "children": {"type": "array", "items": {"$ref": "#/definitions/x.v1.Node"}}}},
  "x.v1.Thing": {"type": "object", "required": ["spec"], "x-kubernetes-group-version-kind": [{"group": "x.example.org", "version": "v1", "kind": "Thing"}],
    "properties": {
      "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
      "spec": {"type": "object", "properties": {
        "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
        "memory": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"},
        "tree": {"$ref": "#/definitions/x.v1.Node"}}}}}
}}`

func TestSwaggerKinds(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "swagger.json")
	if err := os.WriteFile(in, []byte(swagger), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := run(out, in, "", nil); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	readJSON(t, filepath.Join(out, "thing-x-v1.json"), &got)

	oneOf := func(types ...string) map[string]any {
		var list []any
		for _, ty := range types {
			list = append(list, map[string]any{"type": ty})
		}
		return map[string]any{"oneOf": list}
	}
	spec := got["properties"].(map[string]any)["spec"].(map[string]any)
	props := spec["properties"].(map[string]any)
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"strict root", got["additionalProperties"], false},
		{"strict spec", spec["additionalProperties"], false},
		{"required spec is not nullable", spec["type"], "object"},
		{"optional metadata is inlined and nullable", got["properties"].(map[string]any)["metadata"].(map[string]any)["type"], []any{"object", "null"}},
		{"int-or-string", props["port"], oneOf("string", "integer", "null")},
		{"quantity", props["memory"], oneOf("string", "number", "null")},
		{"a type containing itself refers to the file's definitions", props["tree"].(map[string]any)["properties"].(map[string]any)["children"].(map[string]any)["items"], map[string]any{"$ref": "#/definitions/x.v1.Node"}},
		{"no descriptions", got["definitions"].(map[string]any)["x.v1.Node"].(map[string]any)["description"], nil},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.what, c.got, c.want)
		}
	}
	var meta map[string]any
	readJSON(t, filepath.Join(out, ObjectMetaFile), &meta)
	if meta["additionalProperties"] != false {
		t.Errorf("%s is not strict: %v", ObjectMetaFile, meta)
	}
}

const crdYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.x.example.org}
spec:
  group: x.example.org
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          metadata: {type: object}
          spec:
            type: object
            properties:
              size: {x-kubernetes-int-or-string: true}
              note: {type: string, nullable: true}
              free: {type: object, x-kubernetes-preserve-unknown-fields: true, properties: {known: {type: string}}}
  - name: v0
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
`

func TestCRDSchemas(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), []byte(crdYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, ObjectMetaFile)
	if err := os.WriteFile(meta, []byte(`{"type":"object","additionalProperties":false,"properties":{"name":{"type":"string"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := run(out, "", meta, []string{dir}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "widget-x-v0.json")); !os.IsNotExist(err) {
		t.Errorf("a version not served got a schema (%v)", err)
	}
	var got map[string]any
	readJSON(t, filepath.Join(out, "widget-x-v1.json"), &got)
	props := got["properties"].(map[string]any)
	spec := props["spec"].(map[string]any)
	specProps := spec["properties"].(map[string]any)
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"the root is not strict (apiVersion, kind)", got["additionalProperties"], nil},
		{"spec is strict", spec["additionalProperties"], false},
		{"metadata is ObjectMeta", props["metadata"].(map[string]any)["additionalProperties"], false},
		{"int-or-string", specProps["size"].(map[string]any)["oneOf"], []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}},
		{"nullable", specProps["note"].(map[string]any)["type"], []any{"string", "null"}},
		{"preserved unknown fields stay open", specProps["free"].(map[string]any)["additionalProperties"], nil},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.what, c.got, c.want)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
