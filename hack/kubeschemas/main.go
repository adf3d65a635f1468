// SPDX-License-Identifier: Apache-2.0

// Command kubeschemas writes the JSON schemas kubeconform validates the
// rendered manifests against (make lint), offline: kubeconform's default
// schema location is a download, which the build environment does not
// have. It does what kubeconform's scripts/openapi2jsonschema.py and the
// kubernetes-json-schema "standalone-strict" files do:
//
//   - -swagger: every kind of a Kubernetes release's swagger.json
//     (api/openapi-spec of the k8s.io/kubernetes module), one file per
//     group, version and kind;
//   - -crds: every served version of the CRDs in the given files or
//     directories.
//
// Files are named as kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json
// template names them: lowercase kind, then "-<first label of the group>"
// unless the group is core, then "-<version>" (deployment-apps-v1.json,
// service-v1.json, ippool-ipkeeper-v1alpha1.json). Each schema is
// standalone: references are inlined, except where a type contains itself
// (JSONSchemaProps), which refers to a definitions section of the same
// file. Schemas are strict: an object with properties allows no others
// (additionalProperties: false), unless a CRD preserves unknown fields
// there. As in openapi2jsonschema.py, int-or-string becomes "string or
// integer" and the swagger's optional fields may be null; a Quantity is a
// string or a number (the swagger only says string, while YAML gives "1"
// as a number). A CRD's metadata is checked as ObjectMeta (from
// -swagger, or from -objectmeta, a file an earlier -swagger run wrote).
//
// Usage:
//
//	kubeschemas -out DIR -swagger swagger.json
//	kubeschemas -out DIR -objectmeta DIR/_objectmeta.json -crds manifests/crds -crds tests/crds/cert-manager
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// ObjectMetaFile is where a -swagger run writes ObjectMeta's schema, for
// later -crds runs.
const ObjectMetaFile = "_objectmeta.json"

const (
	objectMetaDef = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
	quantityDef   = "io.k8s.apimachinery.pkg.api.resource.Quantity"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var (
		out, swagger, objectMeta string
		crds                     listFlag
	)
	flag.StringVar(&out, "out", "", "directory to write the schemas into (created)")
	flag.StringVar(&swagger, "swagger", "", "a Kubernetes swagger.json: write a schema per kind")
	flag.StringVar(&objectMeta, "objectmeta", "", "ObjectMeta's schema ("+ObjectMetaFile+" of a -swagger run), for CRDs' metadata")
	flag.Var(&crds, "crds", "a CRD manifest, or a directory of them: write a schema per served version (repeatable)")
	flag.Parse()
	if err := run(out, swagger, objectMeta, crds); err != nil {
		fmt.Fprintln(os.Stderr, "kubeschemas:", err)
		os.Exit(1)
	}
}

func run(out, swagger, objectMeta string, crds []string) error {
	if out == "" || (swagger == "" && len(crds) == 0) {
		return errors.New("usage: kubeschemas -out DIR [-swagger FILE] [-objectmeta FILE] [-crds PATH] (-crds repeatable)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var meta map[string]any
	if swagger != "" {
		defs, err := readSwagger(swagger)
		if err != nil {
			return err
		}
		n, err := writeKinds(out, defs)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "kubeschemas: %d schemas from %s\n", n, swagger)
		meta = (&expander{defs: defs}).standalone(objectMetaDef)
		if err := writeJSON(filepath.Join(out, ObjectMetaFile), meta); err != nil {
			return err
		}
	} else if objectMeta != "" {
		b, err := os.ReadFile(objectMeta)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("%s: %w", objectMeta, err)
		}
	}
	n := 0
	for _, path := range crds {
		files, err := yamlFiles(path)
		if err != nil {
			return err
		}
		for _, f := range files {
			written, err := writeCRDs(out, f, meta)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			n += written
		}
	}
	if len(crds) > 0 {
		fmt.Fprintf(os.Stderr, "kubeschemas: %d schemas from CRDs in %s\n", n, strings.Join(crds, ", "))
	}
	return nil
}

// fileName is kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json.
func fileName(group, version, kind string) string {
	suffix := "-" + version
	if group != "" {
		suffix = "-" + strings.SplitN(group, ".", 2)[0] + suffix
	}
	return strings.ToLower(kind+suffix) + ".json"
}

// --- the swagger ---

func readSwagger(path string) (map[string]map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Definitions) == 0 {
		return nil, fmt.Errorf("%s: no definitions", path)
	}
	return doc.Definitions, nil
}

// writeKinds writes one schema per group, version and kind of the
// definitions that have one.
func writeKinds(out string, defs map[string]map[string]any) (int, error) {
	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	sort.Strings(names)
	n := 0
	for _, name := range names {
		gvks, _ := defs[name]["x-kubernetes-group-version-kind"].([]any)
		if len(gvks) == 0 {
			continue
		}
		schema := (&expander{defs: defs}).standalone(name)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if version == "" || kind == "" {
				return n, fmt.Errorf("definition %s: a group-version-kind without version or kind", name)
			}
			if err := writeJSON(filepath.Join(out, fileName(group, version, kind)), schema); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// expander inlines a definition's references.
type expander struct {
	defs map[string]map[string]any
	// stack are the definitions being inlined, to find a type that
	// contains itself; cyclic are those found, written once into the
	// file's definitions section.
	stack  []string
	cyclic map[string]bool
}

// standalone is definition name with every reference inlined, except
// cycles, which refer to #/definitions of the same schema.
func (e *expander) standalone(name string) map[string]any {
	e.cyclic = map[string]bool{}
	root := e.definition(name)
	if len(e.cyclic) == 0 {
		return root
	}
	local := map[string]any{}
	for done := map[string]bool{}; len(done) < len(e.cyclic); {
		for c := range e.cyclic {
			if !done[c] {
				done[c] = true
				local[c] = e.definition(c) // may find more cycles
			}
		}
	}
	root["definitions"] = local
	return root
}

func (e *expander) definition(name string) map[string]any {
	if name == quantityDef {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	}
	for _, s := range e.stack {
		if s == name {
			e.cyclic[name] = true
			return map[string]any{"$ref": "#/definitions/" + name}
		}
	}
	e.stack = append(e.stack, name)
	defer func() { e.stack = e.stack[:len(e.stack)-1] }()
	return e.schema(e.defs[name])
}

// schema converts one swagger schema: references inlined, descriptions and
// extensions dropped, objects strict, optional properties nullable.
func (e *expander) schema(in map[string]any) map[string]any {
	if ref, ok := in["$ref"].(string); ok {
		return e.definition(strings.TrimPrefix(ref, "#/definitions/"))
	}
	if in["format"] == "int-or-string" {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	}
	out := map[string]any{}
	for k, v := range in {
		switch {
		case k == "description" || strings.HasPrefix(k, "x-kubernetes-"):
		case k == "properties":
			props := map[string]any{}
			required := map[string]bool{}
			for _, r := range asSlice(in["required"]) {
				if s, ok := r.(string); ok {
					required[s] = true
				}
			}
			for name, p := range asMap(v) {
				ps := e.schema(asMap(p))
				if !required[name] {
					ps = nullable(ps)
				}
				props[name] = ps
			}
			out[k] = props
		case k == "items" || k == "additionalProperties":
			if m, ok := v.(map[string]any); ok {
				out[k] = e.schema(m)
			} else {
				out[k] = v
			}
		default:
			out[k] = v
		}
	}
	if _, ok := out["properties"]; ok {
		if _, set := out["additionalProperties"]; !set {
			out["additionalProperties"] = false
		}
	}
	return out
}

// nullable lets a schema also accept null: an optional field left empty
// in YAML ("field:") is null, which the API server takes as absent.
func nullable(s map[string]any) map[string]any {
	switch t := s["type"].(type) {
	case string:
		s["type"] = []any{t, "null"}
		return s
	case []any:
		for _, x := range t {
			if x == "null" {
				return s
			}
		}
		s["type"] = append(t, "null")
		return s
	}
	if _, ok := s["oneOf"]; ok {
		s["oneOf"] = append(asSlice(s["oneOf"]), map[string]any{"type": "null"})
		return s
	}
	if len(s) == 0 {
		return s // anything, null included
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

// --- CRDs ---

func yamlFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) && filepath.Base(p) != "kustomization.yaml" {
			files = append(files, p)
		}
		return err
	})
	sort.Strings(files)
	return files, err
}

// writeCRDs writes a schema per served version of each CRD in file; other
// documents are skipped.
func writeCRDs(out, file string, meta map[string]any) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, docBytes := range bytes.Split(b, []byte("\n---")) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(docBytes, &crd); err != nil {
			return n, err
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			raw, err := json.Marshal(v.Schema.OpenAPIV3Schema)
			if err != nil {
				return n, err
			}
			var schema map[string]any
			if err := json.Unmarshal(raw, &schema); err != nil {
				return n, err
			}
			schema = crdSchema(schema, true)
			if meta != nil {
				if props := asMap(schema["properties"]); props != nil {
					props["metadata"] = meta
				}
			}
			if err := writeJSON(filepath.Join(out, fileName(crd.Spec.Group, v.Name, crd.Spec.Names.Kind)), schema); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// crdSchema makes a CRD's structural schema strict as
// openapi2jsonschema.py does (not at the root, where apiVersion, kind and
// metadata are), except where unknown fields are preserved.
func crdSchema(in map[string]any, root bool) map[string]any {
	out := map[string]any{}
	for k, v := range in {
		switch k {
		case "description":
		case "properties":
			props := map[string]any{}
			for name, p := range asMap(v) {
				props[name] = crdSchema(asMap(p), false)
			}
			out[k] = props
		case "items", "additionalProperties", "not":
			if m, ok := v.(map[string]any); ok {
				out[k] = crdSchema(m, false)
			} else {
				out[k] = v
			}
		case "allOf", "anyOf", "oneOf":
			var list []any
			for _, x := range asSlice(v) {
				list = append(list, crdSchema(asMap(x), false))
			}
			out[k] = list
		default:
			out[k] = v
		}
	}
	if out["x-kubernetes-int-or-string"] == true && out["anyOf"] == nil && out["oneOf"] == nil {
		out["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
	}
	if out["nullable"] == true {
		out = nullable(out)
	}
	_, hasProps := out["properties"]
	_, set := out["additionalProperties"]
	if hasProps && !set && !root && out["x-kubernetes-preserve-unknown-fields"] != true {
		out["additionalProperties"] = false
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
