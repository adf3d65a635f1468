// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/naming"
)

func TestPoolName(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		want    string
		wantErr []string // substrings of the error; nil means success
	}{
		{
			name:   "valid config",
			config: netconf(`{"type":"ipkeeper","range":"10.1.0.0/24"}`),
			want:   "storage",
		},
		{
			name:   "valid dual-stack config with a non-DNS network name",
			config: `{"cniVersion":"1.0.0","name":"Tenant_A/storage","type":"bridge","ipam":{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24"},{"range":"fd00::/64"}]}}`,
			want:   naming.InlinePool("Tenant_A/storage"),
		},
		{
			name:   "a pool named",
			config: netconf(`{"type":"ipkeeper","pool":"blue"}`),
			want:   "blue",
		},
		{
			// Edited into an invalid combination after the ADD.
			name:   "a pool named next to inline ranges",
			config: netconf(`{"type":"ipkeeper","pool":"blue","range":"10.1.0.0/24"}`),
			want:   "blue",
		},
		{
			// The NAD was edited into something invalid after the pod's
			// ADD: its DEL must still find the pool by name.
			name:   "invalid range, name present",
			config: netconf(`{"type":"ipkeeper","range":"10.1.0.0/33"}`),
			want:   "storage",
		},
		{
			name:   "no ipam section, name present",
			config: `{"cniVersion":"1.0.0","name":"storage","type":"macvlan"}`,
			want:   "storage",
		},
		{
			name:   "ipam of the wrong type, name present",
			config: `{"cniVersion":"1.0.0","name":"storage","type":"macvlan","ipam":"ipkeeper"}`,
			want:   "storage",
		},
		{
			name:   "two ranges of one family, name present",
			config: netconf(`{"type":"ipkeeper","ipRanges":[{"range":"10.1.0.0/24"},{"range":"10.2.0.0/24"}]}`),
			want:   "storage",
		},
		{
			name:    "invalid JSON",
			config:  `{"cniVersion":"1.0.0","name":"storage",`,
			wantErr: []string{"not valid JSON"},
		},
		{
			name:    "empty input",
			config:  ``,
			wantErr: []string{"not valid JSON"},
		},
		{
			name:    "name missing",
			config:  `{"cniVersion":"1.0.0","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.1.0.0/24"}}`,
			wantErr: []string{"name", "required"},
		},
		{
			name:    "name empty",
			config:  `{"cniVersion":"1.0.0","name":"","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.1.0.0/24"}}`,
			wantErr: []string{"name", "required"},
		},
		{
			name:    "JSON null",
			config:  `null`,
			wantErr: []string{"name", "required"},
		},
		{
			name:    "name of the wrong type",
			config:  `{"cniVersion":"1.0.0","name":7,"type":"macvlan"}`,
			wantErr: []string{"name"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := poolName([]byte(tt.config))
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("poolName = %q, %v, want %q", got, err, tt.want)
				}
				// A config that does parse must yield the very pool ADD used.
				if cfg, perr := ipamconfig.Parse([]byte(tt.config)); perr == nil && cfg.PoolName() != got {
					t.Errorf("poolName = %q but ADD would use %q", got, cfg.PoolName())
				}
				return
			}
			if err == nil {
				t.Fatalf("poolName = %q, want an error mentioning %q", got, tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}
