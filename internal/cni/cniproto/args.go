// SPDX-License-Identifier: Apache-2.0

package cniproto

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Well-known CNI_ARGS keys set by Kubernetes runtimes and Multus.
const (
	ArgIgnoreUnknown    = "IgnoreUnknown"
	ArgPodNamespace     = "K8S_POD_NAMESPACE"
	ArgPodName          = "K8S_POD_NAME"
	ArgPodUID           = "K8S_POD_UID"
	ArgInfraContainerID = "K8S_POD_INFRA_CONTAINER_ID"
	// ArgMAC is the MAC the runtime gives the interface (Multus passes an
	// element's "mac" so; bridge and macvlan set it).
	ArgMAC = "MAC"
)

// CNIArgs is the parsed form of CNI_ARGS ("K1=V1;K2=V2").
type CNIArgs struct {
	IgnoreUnknown    bool
	PodNamespace     string
	PodName          string
	PodUID           string
	InfraContainerID string
	MAC              string
	// Unknown holds keys ipkeeper does not interpret. They are only accepted
	// when IgnoreUnknown is set, as the CNI convention requires. nil if none.
	Unknown map[string]string
}

// ArgsError reports a malformed CNI_ARGS entry. Key and Value are those of
// the offending entry (Value is empty when the entry has no "=").
type ArgsError struct {
	Key     string
	Value   string
	Problem string // what is wrong, for people (not a machine-readable reason)
}

// maxQuoted bounds how much of an attacker- or bug-sized value ends up in
// error messages and logs.
const maxQuoted = 128

func (e *ArgsError) Error() string {
	return fmt.Sprintf("invalid CNI_ARGS entry %s=%s: %s", quoteTrunc(e.Key), quoteTrunc(e.Value), e.Problem)
}

// quoteTrunc quotes s for messages, truncating very long input.
func quoteTrunc(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}

// ParseArgs parses a CNI_ARGS string. Empty entries (e.g. a trailing ";")
// are skipped; a value may itself contain "=". A key repeated with a
// different value is rejected because the pod identity would be ambiguous,
// except IgnoreUnknown spelled two ways: Multus appends IgnoreUnknown=true to
// the runtime's IgnoreUnknown=1.
func ParseArgs(s string) (*CNIArgs, error) {
	a := &CNIArgs{}
	seen := map[string]string{}
	var firstUnknown *ArgsError
	for entry := range strings.SplitSeq(s, ";") {
		if entry == "" {
			continue
		}
		key, val, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, &ArgsError{Key: entry, Problem: `missing "=" (want KEY=VALUE)`}
		}
		if key == "" {
			return nil, &ArgsError{Key: key, Value: val, Problem: "empty key"}
		}
		if prev, dup := seen[key]; dup {
			if prev != val && !sameBool(key, prev, val) {
				return nil, &ArgsError{Key: key, Value: val,
					Problem: fmt.Sprintf("key repeated with a different value (first was %s)", quoteTrunc(prev))}
			}
			continue
		}
		seen[key] = val

		switch key {
		case ArgIgnoreUnknown:
			b, err := parseArgBool(val)
			if err != nil {
				return nil, &ArgsError{Key: key, Value: val, Problem: err.Error()}
			}
			a.IgnoreUnknown = b
		case ArgPodNamespace:
			a.PodNamespace = val
		case ArgPodName:
			a.PodName = val
		case ArgPodUID:
			a.PodUID = val
		case ArgInfraContainerID:
			a.InfraContainerID = val
		case ArgMAC:
			a.MAC = val
		default:
			if a.Unknown == nil {
				a.Unknown = map[string]string{}
			}
			a.Unknown[key] = val
			if firstUnknown == nil {
				firstUnknown = &ArgsError{Key: key, Value: val,
					Problem: "unknown key (the runtime must set IgnoreUnknown=true to pass extra keys)"}
			}
		}
	}
	// Checked last: IgnoreUnknown may appear after the unknown keys.
	if firstUnknown != nil && !a.IgnoreUnknown {
		return nil, firstUnknown
	}
	return a, nil
}

// parseArgBool accepts the same spellings as libcni's UnmarshallableBool.
func parseArgBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, fmt.Errorf(`not a boolean (want "true", "false", "1" or "0")`)
}

// RequirePod reports an error unless the pod namespace and name are known;
// ipkeeper keys allocations by pod, so it cannot work without them.
func (a *CNIArgs) RequirePod() error {
	var missing []string
	if a.PodNamespace == "" {
		missing = append(missing, ArgPodNamespace)
	}
	if a.PodName == "" {
		missing = append(missing, ArgPodName)
	}
	if len(missing) > 0 {
		return fmt.Errorf("CNI_ARGS lacks %s: ipkeeper needs the pod identity that Kubernetes runtimes and Multus provide",
			strings.Join(missing, " and "))
	}
	return nil
}

// String renders a in canonical CNI_ARGS form (known keys first, unknown
// keys sorted); ParseArgs(a.String()) yields an equal value.
func (a *CNIArgs) String() string {
	var parts []string
	if a.IgnoreUnknown {
		parts = append(parts, ArgIgnoreUnknown+"=true")
	}
	for _, kv := range [][2]string{
		{ArgPodNamespace, a.PodNamespace},
		{ArgPodName, a.PodName},
		{ArgPodUID, a.PodUID},
		{ArgInfraContainerID, a.InfraContainerID},
		{ArgMAC, a.MAC},
	} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Unknown)) {
		parts = append(parts, k+"="+a.Unknown[k])
	}
	return strings.Join(parts, ";")
}

// sameBool reports whether two spellings of IgnoreUnknown mean the same.
func sameBool(key, a, b string) bool {
	if key != ArgIgnoreUnknown {
		return false
	}
	x, errA := parseArgBool(a)
	y, errB := parseArgBool(b)
	return errA == nil && errB == nil && x == y
}
