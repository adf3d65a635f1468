// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// The ipam keys, in one place. What Parse reads is the JSON tags of the
// raw* types it decodes into, so this list cannot drift from the decoder;
// to them come the key the plugin binary reads (socketPath,
// internal/cni/cnishim), allowPersistentIPs, which belongs at the top level
// and is told where it is found (multus.Network.FlagProblem), and
// whereabouts' keys ipkeeper reads nothing from.
// Every other key is unknown: told with the known key it is closest to,
// and refused when that key is one that keeps addresses from being handed
// out (guardKeys).
var (
	ipamKeys  = append(jsonKeys(rawIPAM{}), socketPathKey, misplacedFlagKey)
	rangeKeys = jsonKeys(rawRange{})
	routeKeys = jsonKeys(rawRoute{})
	dnsKeys   = jsonKeys(types.DNS{})
)

// socketPathKey is ipam.socketPath, which only the plugin binary reads
// (and refuses unless it names the node's agent socket).
const socketPathKey = "socketPath"

// misplacedFlagKey is allowPersistentIPs, read at the top level only.
const misplacedFlagKey = "allowPersistentIPs"

// guardKeys are the keys that keep addresses from being handed out, each
// with what a misspelling of it, ignored, would hand out.
var guardKeys = map[string]string{
	"gateway":     "the gateway would be handed out",
	"exclude":     "the addresses it excludes would be handed out",
	"range_start": "addresses before the intended first one would be handed out",
	"range_end":   "addresses past the intended last one would be handed out",
}

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
	"kubernetes",
}

// whereaboutsKubernetesKeys are the keys of whereabouts' ipam.kubernetes.
var whereaboutsKubernetesKeys = []string{"kubeconfig", "k8s_api_root"}

// UnknownKey is a key of the ipam section that neither ipkeeper nor
// whereabouts reads: ignored, and told.
type UnknownKey struct {
	// Key is its JSON path: "ipam.sticky_mca", "ipam.ipRanges[0].comment".
	Key string
	// Meant is the known key of the same object it is closest to (a
	// misspelling, another plugin's spelling), "" when none is close.
	Meant string
}

func (k UnknownKey) String() string {
	if k.Meant == "" {
		return k.Key
	}
	return fmt.Sprintf("%s (did you mean %q?)", k.Key, k.Meant)
}

// UnknownKeyList is UnknownKeys as text, each with its "did you mean".
func (c *Config) UnknownKeyList() []string {
	out := make([]string, len(c.UnknownKeys))
	for i, k := range c.UnknownKeys {
		out[i] = k.String()
	}
	return out
}

// ipamObject is the ipam section as raw keys, nil when it is not an
// object (decode reports that). Keys match as encoding/json matches them.
func ipamObject(data []byte) map[string]json.RawMessage {
	var top struct {
		IPAM map[string]json.RawMessage `json:"ipam"`
	}
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	return top.IPAM
}

// unknownKeys lists, sorted by path, the keys of the ipam section (and of
// its ipRanges entries, routes and dns) that nobody reads. A misspelling
// of a guard key is an error instead: ignoring it would hand out what the
// key keeps back.
func unknownKeys(ipam map[string]json.RawMessage) ([]UnknownKey, error) {
	var out []UnknownKey
	check := func(path string, obj map[string]json.RawMessage, known []string) error {
		for _, k := range sortedKeys(obj) {
			if slices.ContainsFunc(known, func(s string) bool { return strings.EqualFold(s, k) }) {
				continue
			}
			u := UnknownKey{Key: path + "." + k, Meant: closest(k, known)}
			if harm, ok := guardKeys[u.Meant]; ok {
				return fieldErr(u.Key, ": unknown key; did you mean %q? ipkeeper would ignore it, and %s: fix the key", u.Meant, harm)
			}
			out = append(out, u)
		}
		return nil
	}
	if err := check("ipam", ipam, append(slices.Clone(ipamKeys), whereaboutsOnlyKeys...)); err != nil {
		return nil, err
	}
	for _, list := range []struct {
		key   string
		known []string
	}{{"ipRanges", rangeKeys}, {"routes", routeKeys}} {
		var entries []map[string]json.RawMessage
		if json.Unmarshal(valueOf(ipam, list.key), &entries) != nil {
			continue
		}
		for i, e := range entries {
			if err := check(indexed("ipam."+list.key, i), e, list.known); err != nil {
				return nil, err
			}
		}
	}
	var dns map[string]json.RawMessage
	if json.Unmarshal(valueOf(ipam, "dns"), &dns) == nil {
		if err := check("ipam.dns", dns, dnsKeys); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b UnknownKey) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// ignoredKeys lists, sorted, the whereabouts-only keys an ipam section
// sets ("ipam.log_file", "ipam.kubernetes.kubeconfig" ...). Undecodable
// parts are skipped: decode reports them.
func ignoredKeys(ipam map[string]json.RawMessage) []string {
	var out []string
	for k := range ipam {
		if k != "kubernetes" && slices.ContainsFunc(whereaboutsOnlyKeys, func(s string) bool { return strings.EqualFold(s, k) }) {
			out = append(out, "ipam."+k)
		}
	}
	var kube map[string]json.RawMessage
	if raw, ok := ipam["kubernetes"]; ok {
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

// valueOf is obj's value of key as encoding/json finds it (an exact
// match, else any case), nil when absent.
func valueOf(obj map[string]json.RawMessage, key string) json.RawMessage {
	if v, ok := obj[key]; ok {
		return v
	}
	for _, k := range sortedKeys(obj) {
		if strings.EqualFold(k, key) {
			return obj[k]
		}
	}
	return nil
}

func sortedKeys(obj map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonKeys returns the JSON keys of a struct's fields, in field order.
func jsonKeys(v any) []string {
	t := reflect.TypeOf(v)
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// closest returns the known key nearest to k, compared without case,
// '_' or '-' (rangeStart, range-start and range_start are one), if it is
// a misspelling away: at most one edit (a letter added, dropped, changed,
// or two swapped) for a key of up to four letters, two for a longer one.
func closest(k string, known []string) string {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '-' {
				return -1
			}
			return r
		}, strings.ToLower(s))
	}
	best, bestD := "", -1
	for _, s := range known {
		n := norm(s)
		limit := 1
		if len(n) > 4 {
			limit = 2
		}
		if d := editDistance(norm(k), n); d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = s, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of adjacent letters.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
