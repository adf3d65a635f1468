// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// table writes tab-aligned columns the way kubectl get does (its
// printers.GetNewTabWriter settings).
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 6, 4, 3, ' ', 0)}
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
