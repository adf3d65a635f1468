package agent

import (
	"strings"
	"testing"
)

func TestMultusDefaultNetworks(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		namespace string
		want      int
	}{
		{"unknown", Options{MultusDefaultNetworks: -1}, "vms", -1},
		{"one", Options{MultusDefaultNetworks: 1}, "vms", 1},
		{"Multus' default system namespace gets none", Options{MultusDefaultNetworks: 2}, "kube-system", 0},
		{"configured system namespaces", Options{MultusDefaultNetworks: 2, MultusSystemNamespaces: []string{"infra"}}, "infra", 0},
		{"kube-system is not special once others are configured", Options{MultusDefaultNetworks: 2, MultusSystemNamespaces: []string{"infra"}}, "kube-system", 2},
	}
	for _, tt := range tests {
		a := &Agent{opts: tt.opts}
		if got := a.multusDefaultNetworks(tt.namespace); got != tt.want {
			t.Errorf("%s: multusDefaultNetworks(%q) = %d, want %d", tt.name, tt.namespace, got, tt.want)
		}
	}
}

func TestArgsClaimRef(t *testing.T) {
	tests := []struct {
		config, want, wantErr string
	}{
		{config: `{"name":"n"}`},
		{config: `{"args":{"cni":{"ipam-claim-reference":"vm1.blue"}}}`, want: "vm1.blue"},
		{config: `{"args":{"cni":{"ipam-claim-reference":7}}}`, wantErr: "args.cni.ipam-claim-reference: want a claim name (string), got 7"},
		{config: `{"args":`, wantErr: "args.cni"},
	}
	for _, tt := range tests {
		got, err := argsClaimRef([]byte(tt.config))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("argsClaimRef(%s) error = %v, want %q", tt.config, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("argsClaimRef(%s) = %q, %v; want %q", tt.config, got, err, tt.want)
		}
	}
}
