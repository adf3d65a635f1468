// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"encoding/json"
	"slices"
)

// whereaboutsOnlyKeys are the ipam keys of whereabouts v0.9.4's
// configuration (its pkg/types IPAMConfig) that ipkeeper reads nothing
// from: its datastore, logging, leader election, reconciler and
// node-slice settings. A NAD moved from whereabouts may keep them; they
// are reported (Config.IgnoredKeys) so nobody believes they still act.
// "kubernetes" is reported by its sub-keys.
var whereaboutsOnlyKeys = []string{
	"datastore",
	"etcd_host", "etcd_username", "etcd_password", "etcd_key_file", "etcd_cert_file", "etcd_ca_cert_file",
	"configuration_path",
	"log_file", "log_level",
	"leader_lease_duration", "leader_renew_deadline", "leader_retry_period",
	"enable_overlapping_ranges",
	"reconciler_cron_expression",
	"sleep_for_race",
	"node_slice_size",
}

// whereaboutsKubernetesKeys are the keys of whereabouts' ipam.kubernetes.
var whereaboutsKubernetesKeys = []string{"kubeconfig", "k8s_api_root"}

// ignoredKeys lists, sorted, the whereabouts-only keys an ipam section
// sets ("ipam.log_file", "ipam.kubernetes.kubeconfig" ...). Undecodable
// parts are skipped: decode reports them.
func ignoredKeys(data []byte) []string {
	var top struct {
		IPAM map[string]json.RawMessage `json:"ipam"`
	}
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	var out []string
	for k := range top.IPAM {
		if slices.Contains(whereaboutsOnlyKeys, k) {
			out = append(out, "ipam."+k)
		}
	}
	var kube map[string]json.RawMessage
	if raw, ok := top.IPAM["kubernetes"]; ok {
		if json.Unmarshal(raw, &kube) != nil || len(kube) == 0 {
			out = append(out, "ipam.kubernetes")
		}
		for k := range kube {
			if slices.Contains(whereaboutsKubernetesKeys, k) {
				out = append(out, "ipam.kubernetes."+k)
			} else {
				out = append(out, "ipam.kubernetes") // not whereabouts' either: still nothing ipkeeper reads
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
