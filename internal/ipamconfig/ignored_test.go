// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

func TestIgnoredKeys(t *testing.T) {
	tests := []struct {
		name, ipam, want string
	}{
		{"none", `"range": "10.0.0.0/24"`, ""},
		{"whereabouts leftovers", `"range": "10.0.0.0/24", "log_file": "/tmp/wb.log", "log_level": "debug", "leader_lease_duration": 1500,
			"enable_overlapping_ranges": true, "reconciler_cron_expression": "30 4 * * *", "configuration_path": "/etc/cni/net.d/whereabouts.d/whereabouts.conf",
			"kubernetes": {"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig", "k8s_api_root": "https://10.0.0.1"}, "node_slice_size": "/26", "datastore": "kubernetes"`,
			"ipam.configuration_path ipam.datastore ipam.enable_overlapping_ranges ipam.kubernetes.k8s_api_root ipam.kubernetes.kubeconfig ipam.leader_lease_duration ipam.log_file ipam.log_level ipam.node_slice_size ipam.reconciler_cron_expression"},
		{"keys ipkeeper reads are not listed", `"range": "10.0.0.0/24", "network_name": "blue", "gateway": "10.0.0.1", "exclude": ["10.0.0.5/32"]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(`{"name": "net", "ipam": {"type": "ipkeeper", ` + tt.ipam + `}}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cfg.IgnoredKeys, " "); got != tt.want {
				t.Errorf("IgnoredKeys %q, want %q", got, tt.want)
			}
		})
	}
}
