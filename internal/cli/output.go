// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// Output formats of -o; "" is the table.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputName  = "name"
)

// templateFormats are the -o formats that take an argument after "=",
// as kubectl get's: they read the printed rows as a kubectl List.
var templateFormats = []string{"jsonpath", "jsonpath-as-json", "go-template", "custom-columns"}

// formats returns a command's -o values: its own (table-like) ones, then
// name and the template formats every command has.
func formats(own ...string) []string {
	out := append(own, outputName)
	for _, f := range templateFormats {
		out = append(out, f+"=...")
	}
	return out
}

// formatNames are the -o values shell completion offers.
func formatNames(formats []string) []string {
	out := make([]string, len(formats))
	for i, f := range formats {
		out[i] = strings.TrimSuffix(f, "...")
	}
	return out
}

// output is a parsed -o: its format and, for the template formats, the
// printer built from the template (parsed before any API call, so a bad
// template is a usage error).
type output struct {
	format  string
	printer printers.ResourcePrinter
}

// parseOutput checks -o value against the formats command accepts.
func parseOutput(command string, formats []string, value string) (output, error) {
	name, arg, hasArg := strings.Cut(value, "=")
	accepted := false
	for _, f := range formats {
		fname, _, takesArg := strings.Cut(f, "=")
		accepted = accepted || (fname == name && takesArg == hasArg)
	}
	if value != outputTable && !accepted {
		return output{}, usageErrorf("-o %q: %s accepts %s", value, command, strings.Join(formats, ", "))
	}
	if !hasArg {
		return output{format: value}, nil
	}
	if arg == "" {
		return output{}, usageErrorf("-o %q: %s needs a template after the =", value, name)
	}
	p, err := templatePrinter(name, arg)
	if err != nil {
		return output{}, usageErrorf("-o %q: %v", value, err)
	}
	return output{format: name, printer: p}, nil
}

// templatePrinter builds cli-runtime's printer of a template format
// (custom-columns: ours, as cli-runtime has none).
func templatePrinter(format, template string) (printers.ResourcePrinter, error) {
	if format == "custom-columns" {
		return newCustomColumns(template)
	}
	flags := genericclioptions.NewKubeTemplatePrintFlags()
	return flags.ToPrinter(format + "=" + template)
}

// printable is what a command prints, in every -o format.
type printable struct {
	// doc is what -o json and -o yaml print; the template formats read it
	// too, a slice as the items of a kubectl List.
	doc any
	// names are the objects -o name prints, one per row that names one.
	names []objectName
	// table writes the default output, and -o wide's (wide true).
	table func(w io.Writer, wide bool) error
}

// objectName is an object -o name prints as kind.group/name, the form
// kubectl get takes.
type objectName struct {
	gvk  schema.GroupVersionKind
	name string
}

// isTable is true for the table formats (the default and wide), which
// say "none found" on stderr instead of printing nothing.
func (o output) isTable() bool { return o.format == outputTable || o.format == outputWide }

// print writes p as -o asks.
func (s *session) print(p printable) error {
	switch s.output.format {
	case outputTable, outputWide:
		return p.table(s.out, s.output.format == outputWide)
	case outputJSON, outputYAML:
		return printStructured(s.out, s.output.format, p.doc)
	case outputName:
		return printNames(s.out, p.names)
	}
	obj, err := toUnstructured(p.doc)
	if err != nil {
		return err
	}
	if err := s.output.printer.PrintObj(obj, s.out); err != nil {
		return fmt.Errorf("printing -o %s: %w", s.output.format, err)
	}
	return nil
}

// printNames prints kind.group/name lines with cli-runtime's name printer.
func printNames(w io.Writer, names []objectName) error {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, n := range names {
		var u unstructured.Unstructured
		u.SetGroupVersionKind(n.gvk)
		u.SetName(n.name)
		list.Items = append(list.Items, u)
	}
	p := printers.NamePrinter{}
	if err := p.PrintObj(list, w); err != nil {
		return fmt.Errorf("printing -o name: %w", err)
	}
	return nil
}

// toUnstructured turns doc into what the template printers read: a slice
// becomes a kubectl List of its rows, anything else one object.
func toUnstructured(doc any) (runtime.Object, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the output: %w", err)
	}
	if reflect.ValueOf(doc).Kind() != reflect.Slice {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(b, &u.Object); err != nil {
			return nil, fmt.Errorf("decoding the output: %w", err)
		}
		return u, nil
	}
	var rows []map[string]any
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("decoding the output: %w", err)
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, r := range rows {
		list.Items = append(list.Items, unstructured.Unstructured{Object: r})
	}
	return list, nil
}

// customColumns is -o custom-columns=HEADER:PATH,...: kubectl get's
// format (k8s.io/kubectl has it, cli-runtime does not), one row per item.
type customColumns struct {
	headers []string
	paths   []*jsonpath.JSONPath
}

func newCustomColumns(spec string) (*customColumns, error) {
	c := &customColumns{}
	for _, col := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(col, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("column %q: want HEADER:JSONPATH", col)
		}
		p := jsonpath.New(header).AllowMissingKeys(true)
		if err := p.Parse(relaxedJSONPath(path)); err != nil {
			return nil, fmt.Errorf("column %q: %w", col, err)
		}
		c.headers, c.paths = append(c.headers, header), append(c.paths, p)
	}
	return c, nil
}

// relaxedJSONPath accepts kubectl's short forms: ".ip" and "ip" for "{.ip}".
func relaxedJSONPath(path string) string {
	if strings.HasPrefix(path, "{") {
		return path
	}
	return "{." + strings.TrimPrefix(path, ".") + "}"
}

// PrintObj writes the header and one row per item of obj (obj itself
// when it is not a list).
func (c *customColumns) PrintObj(obj runtime.Object, w io.Writer) error {
	rows := []map[string]any{}
	switch o := obj.(type) {
	case *unstructured.UnstructuredList:
		for _, item := range o.Items {
			rows = append(rows, item.Object)
		}
	case *unstructured.Unstructured:
		rows = append(rows, o.Object)
	default:
		return fmt.Errorf("custom-columns: cannot print %T", obj)
	}
	t := newTable(w, c.headers...)
	for _, r := range rows {
		cells := make([]string, len(c.paths))
		for i, p := range c.paths {
			cell, err := columnValue(p, r)
			if err != nil {
				return fmt.Errorf("column %s: %w", c.headers[i], err)
			}
			cells[i] = cell
		}
		t.row(cells...)
	}
	return t.flush()
}

// columnValue is the cell of one row: the values the path finds, joined
// by commas, "" (<none>) when it finds none.
func columnValue(p *jsonpath.JSONPath, row map[string]any) (string, error) {
	results, err := p.FindResults(row)
	if err != nil {
		return "", err
	}
	var vals []string
	for _, rs := range results {
		for _, v := range rs {
			vals = append(vals, fmt.Sprint(v.Interface()))
		}
	}
	return strings.Join(vals, ","), nil
}

// table writes tab-aligned columns the way kubectl get does, with
// cli-runtime's tab writer.
type table struct {
	w interface {
		io.Writer
		Flush() error
	}
}

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: printers.GetNewTabWriter(out)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "<none>"
		}
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// printStructured writes v as -o json or -o yaml asks.
func printStructured(out io.Writer, format string, v any) error {
	var b []byte
	var err error
	switch format {
	case outputJSON:
		b, err = json.MarshalIndent(v, "", "    ")
		b = append(b, '\n')
	case outputYAML:
		b, err = yaml.Marshal(v)
	default:
		return fmt.Errorf("output format %q has no structured form", format)
	}
	if err != nil {
		return fmt.Errorf("encoding the output as %s: %w", format, err)
	}
	_, err = out.Write(b)
	return err
}

// age is kubectl's AGE column: how long ago t was, "<unknown>" when unset.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}
