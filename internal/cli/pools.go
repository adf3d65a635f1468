// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var poolsCommand = command{
	name:     "pools",
	synopsis: "[POOL...] [-o FORMAT]",
	summary:  "Show each IPPool's usage (size, used, free, out of range, cooling down) and per-namespace quota from its status.",
	formats:  formats(outputWide, outputJSON, outputYAML),
	setup:    func(*pflag.FlagSet) runFunc { return runPools },
	complete: completePools,
}

// completePools offers the IPPools not named yet.
func completePools(ctx context.Context, s *session, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	var list ipkeeperv1alpha1.IPPoolList
	if err := s.client.List(ctx, &list); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, p := range list.Items {
		if !slices.Contains(args, p.Name) {
			names = append(names, p.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// PoolUsage is one pool's row.
type PoolUsage struct {
	Name        string `json:"name"`
	Size        string `json:"size"`
	Used        int64  `json:"used"`
	Free        string `json:"free"`
	OutOfRange  int64  `json:"outOfRange"`
	CoolingDown int64  `json:"coolingDown"`
	Ready       string `json:"ready"`
	// MaxAddressesPerNamespace is the pool's per-namespace quota; unset: none.
	MaxAddressesPerNamespace *int32 `json:"maxAddressesPerNamespace,omitempty"`
	// Namespaces are the namespaces nearest to it (status.namespaces).
	Namespaces []ipkeeperv1alpha1.NamespaceUsage `json:"namespaces,omitempty"`
	Networks   []string                          `json:"networks,omitempty"`
	Families   []ipkeeperv1alpha1.FamilyUsage    `json:"families,omitempty"`
	Ranges     []ipkeeperv1alpha1.RangeUsage     `json:"ranges,omitempty"`
	Conditions []string                          `json:"conditions,omitempty"`
}

func runPools(ctx context.Context, s *session, args []string) error {
	var pools []ipkeeperv1alpha1.IPPool
	if len(args) == 0 {
		var list ipkeeperv1alpha1.IPPoolList
		if err := s.client.List(ctx, &list); err != nil {
			return fmt.Errorf("listing IPPools: %w", err)
		}
		pools = list.Items
		sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	}
	for _, name := range args {
		var p ipkeeperv1alpha1.IPPool
		if err := s.client.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			if apierrors.IsNotFound(err) {
				return &notFoundError{fmt.Sprintf("IPPool %q not found", name)}
			}
			return fmt.Errorf("reading IPPool %s: %w", name, err)
		}
		pools = append(pools, p)
	}
	rows := make([]PoolUsage, 0, len(pools))
	for i := range pools {
		rows = append(rows, poolUsage(&pools[i]))
	}
	if len(rows) == 0 && s.output.isTable() {
		fmt.Fprintln(s.errOut, "No IPPools found.")
		return nil
	}
	return s.print(printable{doc: rows, names: poolNames(rows), table: func(w io.Writer, wide bool) error { return poolsTable(w, rows, wide) }})
}

// poolNames are the IPPools of rows, for -o name.
func poolNames(rows []PoolUsage) []objectName {
	out := make([]objectName, len(rows))
	for i, r := range rows {
		out[i] = objectName{gvk: ipkeeperv1alpha1.GroupVersion.WithKind("IPPool"), name: r.Name}
	}
	return out
}

// poolsTable is pools' table (wide: with the families, ranges, namespaces
// and the conditions that are true).
func poolsTable(w io.Writer, rows []PoolUsage, wide bool) error {
	header := []string{"NAME", "SIZE", "USED", "FREE", "OUT-OF-RANGE", "COOLING", "READY", "QUOTA", "NETWORKS"}
	if wide {
		header = append(header, "FAMILIES", "RANGES", "NAMESPACES", "CONDITIONS")
	}
	t := newTable(w, header...)
	for _, r := range rows {
		quota := "<none>"
		if r.MaxAddressesPerNamespace != nil {
			quota = fmt.Sprintf("%d/namespace", *r.MaxAddressesPerNamespace)
		}
		row := []string{r.Name, r.Size, fmt.Sprint(r.Used), r.Free, fmt.Sprint(r.OutOfRange), fmt.Sprint(r.CoolingDown), r.Ready, quota, strings.Join(r.Networks, ",")}
		if wide {
			var fams, ranges, namespaces []string
			for _, f := range r.Families {
				fams = append(fams, fmt.Sprintf("%s %d/%s", f.Family, f.Used, f.Size))
			}
			for _, rg := range r.Ranges {
				ranges = append(ranges, fmt.Sprintf("%s %d/%s", rg.Range, rg.Used, rg.Size))
			}
			for _, n := range r.Namespaces {
				namespaces = append(namespaces, fmt.Sprintf("%s %d/%d", n.Namespace, n.Used, *r.MaxAddressesPerNamespace))
			}
			row = append(row, strings.Join(fams, ","), strings.Join(ranges, ","), strings.Join(namespaces, ","), strings.Join(r.Conditions, ","))
		}
		t.row(row...)
	}
	return t.flush()
}

func poolUsage(p *ipkeeperv1alpha1.IPPool) PoolUsage {
	st := &p.Status
	u := PoolUsage{
		Name: p.Name, Size: st.Size, Used: st.Used, Free: st.Free, OutOfRange: st.OutOfRange, CoolingDown: st.CoolingDown,
		Networks: st.Networks, Families: st.Families, Ranges: st.Ranges, Ready: "Unknown",
		MaxAddressesPerNamespace: p.Spec.MaxAddressesPerNamespace,
	}
	if u.MaxAddressesPerNamespace != nil {
		u.Namespaces = st.Namespaces // written only under a quota; stale ones from before its removal are not shown
	}
	if c := meta.FindStatusCondition(st.Conditions, ipkeeperv1alpha1.PoolReady); c != nil {
		u.Ready = string(c.Status)
	}
	for _, c := range st.Conditions {
		if c.Type != ipkeeperv1alpha1.PoolReady && c.Status == "True" {
			u.Conditions = append(u.Conditions, c.Type)
		}
	}
	return u
}
