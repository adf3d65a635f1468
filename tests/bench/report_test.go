// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// A row of the final table: one figure of the issue, measured against a
// baseline taken in the same run.
type row struct {
	fig      int
	what     string
	measured string
	baseline string
	ratio    string
	target   string
	// verdict is "met", "NOT met" or "" (no target: reported for context).
	verdict string
}

var (
	rowsMu sync.Mutex
	rows   []row
)

func record(r row) {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	rows = append(rows, r)
}

// verdict says whether ok holds, for a row that has a target.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// printTable writes every recorded row, in the order of figures.
func printTable(w io.Writer) {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	if len(rows) == 0 {
		return
	}
	slices.SortStableFunc(rows, func(a, b row) int { return a.fig - b.fig })
	fmt.Fprintln(w)
	fmt.Fprintln(w, "=== ipkeeper benchmark: every figure against a baseline measured in the same run ===")
	fmt.Fprintf(w, "machine: %s; load average at start %s, at end %s\n", machine(), loadAtStart, loadAverage())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fig\tmeasure\tipkeeper\tbaseline (same run)\tratio\ttarget\tverdict")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.fig, r.what, r.measured, r.baseline, r.ratio, r.target, r.verdict)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// loadAtStart is the load average when the run began: on a shared machine
// other work competes for the CPU, and every figure here is CPU-bound.
var loadAtStart = loadAverage()

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// machine describes the CPU and memory the figures were measured on.
func machine() string {
	model := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown memory"
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s, %s", runtime.NumCPU(), model, mem, runtime.Version())
}

// percentile returns the p-th percentile (0-100) of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := len(sorted) * p / 100
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mib(bytes float64) float64 { return bytes / (1 << 20) }
