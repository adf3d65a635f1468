// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
)

// A VM's requested addresses (RequestedAddressesAnnotation) are read here
// and recorded on each of its claims (claimstatus.RequestedAnnotation);
// ipkeeper-controller's claim address controller (package claimaddrs)
// reserves them when it fills the claim.

// request is what an owner asks for on one network.
type request struct {
	// raw are the addresses as written in the annotation.
	raw []string
	// err is set when the annotation as a whole cannot be read: then no
	// network's request is known, and every claim of the owner waits.
	err error
	// fallback is claimstatus.RequestedFallbackAnnotation's value for the
	// claim: what it does when a requested address is someone else's.
	fallback string
}

// claimValue is the request as recorded on the claim
// (claimstatus.RequestedAnnotation).
func (r *request) claimValue() string {
	if r.err != nil {
		return "invalid"
	}
	b, _ := json.Marshal(r.raw) // a []string always encodes
	return string(b)
}

// parseRequests reads RequestedAddressesAnnotation: the addresses per
// KubeVirt network name; nil without the annotation.
func parseRequests(annotations map[string]string) (map[string][]string, error) {
	v, ok := annotations[RequestedAddressesAnnotation]
	if !ok {
		return nil, nil
	}
	var out map[string][]string
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("annotation %s %q is not a JSON object from network name to a list of addresses: %w",
			RequestedAddressesAnnotation, truncate(v, 200), err)
	}
	return out, nil
}

// unknownRequestNetworks returns the networks RequestedAddressesAnnotation
// names that are none of networks (the owner's spec.networks), quoted and
// sorted, and the owner's networks, quoted: a misspelled name would drop
// its request in silence. Nil when the annotation is absent or unreadable
// (told as such). A name of one of the owner's networks that ipkeeper does
// not serve is none of its business.
func unknownRequestNetworks(annotations map[string]string, networks []kubevirtv1.Network) (unknown, known []string) {
	reqs, err := parseRequests(annotations)
	if err != nil || len(reqs) == 0 {
		return nil, nil
	}
	has := map[string]bool{}
	for _, n := range networks {
		has[n.Name] = true
		known = append(known, strconv.Quote(n.Name))
	}
	for name := range reqs {
		if !has[name] {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	slices.Sort(unknown)
	return unknown, known
}

// withRequests sets each wanted claim's request from the owner's
// annotations (the VM template's, or the standalone VMI's); restored says
// KubeVirt made the owner by a clone or a restore
// (kubevirt.MadeByRestore), so that a request copied from its source does
// not wait for addresses the source holds.
func withRequests(want []Desired, annotations map[string]string, restored bool) []Desired {
	reqs, err := parseRequests(annotations)
	fallback, ferr := parseFallback(annotations, restored)
	if err == nil {
		err = ferr
	}
	for i := range want {
		switch raw, ok := reqs[want[i].LogicalNetwork]; {
		case err != nil:
			want[i].Request = &request{err: err}
		case ok:
			want[i].Request = &request{raw: raw, fallback: fallback}
		}
	}
	return want
}

// parseFallback reads claimstatus.RequestedFallbackAnnotation: its value
// when set, else FallbackOtherAddresses for an owner KubeVirt restored or
// cloned, else FallbackWait.
func parseFallback(annotations map[string]string, restored bool) (string, error) {
	v, ok := annotations[claimstatus.RequestedFallbackAnnotation]
	switch {
	case !ok && restored:
		return claimstatus.FallbackOtherAddresses, nil
	case !ok:
		return claimstatus.FallbackWait, nil
	case v == claimstatus.FallbackWait || v == claimstatus.FallbackOtherAddresses:
		return v, nil
	}
	return "", fmt.Errorf("annotation %s %q: want %q or %q", claimstatus.RequestedFallbackAnnotation, truncate(v, 100),
		claimstatus.FallbackWait, claimstatus.FallbackOtherAddresses)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
