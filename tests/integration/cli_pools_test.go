// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"regexp"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestCLIPools: pools prints each pool's usage from its status, per family
// and range with -o wide.
func TestCLIPools(t *testing.T) {
	ns := cp.NewNamespace(t, "cli-pools")
	blue, red := ns+"-blue", ns+"-red"
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: "set by the test", LastTransitionTime: metav1.Now()}
	}
	usage := func(size string, used int64, free string) ipkeeperv1alpha1.PoolUsage {
		return ipkeeperv1alpha1.PoolUsage{Size: size, Used: used, Free: free}
	}
	cliPool(t, blue, ipkeeperv1alpha1.PoolRange{Range: "10.199.2.0/24"}, &ipkeeperv1alpha1.IPPoolStatus{
		Size: "254", Used: 3, Free: "251", OutOfRange: 1, CoolingDown: 2, Networks: []string{"blue", "blue-too"},
		Families:   []ipkeeperv1alpha1.FamilyUsage{{Family: "IPv4", PoolUsage: usage("254", 3, "251")}},
		Ranges:     []ipkeeperv1alpha1.RangeUsage{{Range: "10.199.2.0/24", PoolUsage: usage("254", 3, "251")}},
		Conditions: []metav1.Condition{cond(ipkeeperv1alpha1.PoolReady, metav1.ConditionTrue, ipkeeperv1alpha1.PoolReasonValid)},
	})
	cliPool(t, red, ipkeeperv1alpha1.PoolRange{Range: "10.199.3.0/30"}, &ipkeeperv1alpha1.IPPoolStatus{
		Size: "2", Used: 2, Free: "0", Networks: []string{"red"},
		Families: []ipkeeperv1alpha1.FamilyUsage{{Family: "IPv4", PoolUsage: usage("2", 2, "0")}},
		Ranges:   []ipkeeperv1alpha1.RangeUsage{{Range: "10.199.3.0/30", PoolUsage: usage("2", 2, "0")}},
		Conditions: []metav1.Condition{
			cond(ipkeeperv1alpha1.PoolReady, metav1.ConditionTrue, ipkeeperv1alpha1.PoolReasonValid),
			cond(ipkeeperv1alpha1.PoolExhausted, metav1.ConditionTrue, ipkeeperv1alpha1.PoolReasonNoneFree),
		},
	})
	// A pool whose status nobody wrote yet.
	fresh := ns + "-fresh"
	cliPool(t, fresh, ipkeeperv1alpha1.PoolRange{Range: "10.199.4.0/24"}, nil)

	row := func(cells ...string) *regexp.Regexp {
		re := "(?m)^"
		for i, c := range cells {
			if i > 0 {
				re += ` +`
			}
			re += regexp.QuoteMeta(c)
		}
		return regexp.MustCompile(re + `\s*$`)
	}
	hasRows := func(rows ...*regexp.Regexp) func(t *testing.T, r cliResult) {
		return func(t *testing.T, r cliResult) {
			for _, re := range rows {
				if !re.MatchString(r.out) {
					t.Errorf("no row matches %s", re)
				}
			}
		}
	}
	runCLICases(t, []cliCase{
		{name: "table", args: []string{"pools", blue, red, fresh}, code: cli.ExitOK,
			checkExtra: hasRows(
				row("NAME", "SIZE", "USED", "FREE", "OUT-OF-RANGE", "COOLING", "READY", "QUOTA", "NETWORKS"),
				row(blue, "254", "3", "251", "1", "2", "True", "<none>", "blue,blue-too"),
				row(red, "2", "2", "0", "0", "0", "True", "<none>", "red"),
				row(fresh, "<none>", "0", "<none>", "0", "0", "Unknown", "<none>", "<none>"),
			)},
		{name: "all pools", args: []string{"pools"}, code: cli.ExitOK, stdout: []string{blue, red, fresh}},
		{name: "wide", args: []string{"pools", red, "-o", "wide"}, code: cli.ExitOK,
			checkExtra: hasRows(
				row("NAME", "SIZE", "USED", "FREE", "OUT-OF-RANGE", "COOLING", "READY", "QUOTA", "NETWORKS", "FAMILIES", "RANGES", "NAMESPACES", "CONDITIONS"),
				row(red, "2", "2", "0", "0", "0", "True", "<none>", "red", "IPv4", "2/2", "10.199.3.0/30", "2/2", "<none>", "Exhausted"),
			)},
		{name: "json", args: []string{"pools", blue, "-o", "json"}, code: cli.ExitOK,
			checkExtra: func(t *testing.T, r cliResult) {
				var rows []cli.PoolUsage
				if err := json.Unmarshal([]byte(r.out), &rows); err != nil {
					t.Fatalf("-o json: %v", err)
				}
				if len(rows) != 1 || rows[0].Name != blue || rows[0].Used != 3 || rows[0].OutOfRange != 1 || rows[0].CoolingDown != 2 || rows[0].Free != "251" {
					t.Errorf("rows = %+v, want %s with used 3, out of range 1, cooling 2, free 251", rows, blue)
				}
			}},
		{name: "yaml", args: []string{"pools", red, "-o", "yaml"}, code: cli.ExitOK,
			stdout: []string{"name: " + red, "used: 2", "- Exhausted"}},
		{name: "missing pool", args: []string{"pools", ns + "-nope"}, code: cli.ExitError,
			stderr: []string{`IPPool "` + ns + `-nope" not found`}},
		{name: "unknown flag", args: []string{"pools", "--bogus"}, code: cli.ExitUsage,
			stderr: []string{"unknown flag: --bogus"}},
	})
}
