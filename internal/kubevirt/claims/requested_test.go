// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
)

// A VM's requested addresses reach each of its claims as the claim
// annotation value claimaddrs reads: the network's list as written (its
// checks are claimaddrs'), or "invalid" for every claim when the VM's
// annotation cannot be read at all.
func TestWithRequests(t *testing.T) {
	want := func() []Desired {
		return []Desired{{Name: "vm1.blue", LogicalNetwork: "blue"}, {Name: "vm1.red", LogicalNetwork: "red"}}
	}
	tests := []struct {
		name        string
		annotations map[string]string
		restored    bool
		// claim annotation value per network, "" for no request
		blue, red string
		errPart   string
		// fallback recorded with each request ("" for the default, wait)
		fallback string
	}{
		{name: "no annotation"},
		{name: "one network", annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5","fd00::5"]}`},
			blue: `["10.0.0.5","fd00::5"]`},
		{name: "each network its own", annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5/24"],"red":["fd00::7"]}`},
			blue: `["10.0.0.5/24"]`, red: `["fd00::7"]`},
		// Passed on as written: claimaddrs refuses it with the reason.
		{name: "empty list passed on", annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":[]}`}, blue: `[]`},
		{name: "unknown network ignored", annotations: map[string]string{RequestedAddressesAnnotation: `{"green":["10.0.0.5"]}`}},
		{name: "malformed holds every network", annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":"10.0.0.5"}`},
			blue: "invalid", red: "invalid", errPart: "is not a JSON object from network name to a list of addresses"},
		// The message quotes at most 200 bytes of a long annotation.
		{name: "long malformed value truncated", annotations: map[string]string{RequestedAddressesAnnotation: "[" + strings.Repeat("x", 300)},
			blue: "invalid", red: "invalid", errPart: `"[` + strings.Repeat("x", 199) + `..."`},
		// A clone or restore's request was copied from its source: it
		// does not wait for addresses the source holds.
		{name: "restored owner falls back to other addresses", restored: true,
			annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5"]}`}, blue: `["10.0.0.5"]`, fallback: claimstatus.FallbackOtherAddresses},
		{name: "restored owner may still choose to wait", restored: true,
			annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5"]}`, claimstatus.RequestedFallbackAnnotation: "wait"}, blue: `["10.0.0.5"]`},
		{name: "any owner may choose other addresses",
			annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5"]}`, claimstatus.RequestedFallbackAnnotation: "other-addresses"},
			blue:        `["10.0.0.5"]`, fallback: claimstatus.FallbackOtherAddresses},
		{name: "unknown fallback holds every network",
			annotations: map[string]string{RequestedAddressesAnnotation: `{"blue":["10.0.0.5"]}`, claimstatus.RequestedFallbackAnnotation: "sometimes"},
			blue:        "invalid", red: "invalid", errPart: `annotation ipkeeper.io/requested-addresses-fallback "sometimes": want "wait" or "other-addresses"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withRequests(want(), tt.annotations, tt.restored)
			for i, w := range []string{tt.blue, tt.red} {
				r := got[i].Request
				if (r == nil) != (w == "") || (r != nil && r.claimValue() != w) {
					t.Fatalf("%s request = %+v, want %q", got[i].LogicalNetwork, r, w)
				}
				if r != nil && tt.errPart != "" && (r.err == nil || !strings.Contains(r.err.Error(), tt.errPart)) {
					t.Fatalf("%s request error = %v, want %q", got[i].LogicalNetwork, r.err, tt.errPart)
				}
				if r == nil || r.err != nil {
					continue
				}
				var claim ipamclaimsv1alpha1.IPAMClaim
				setRequest(&claim, got[i])
				if f := claim.Annotations[claimstatus.RequestedFallbackAnnotation]; f != tt.fallback {
					t.Fatalf("%s fallback recorded %q, want %q", got[i].LogicalNetwork, f, tt.fallback)
				}
				if !requestRecorded(&claim, got[i]) {
					t.Fatalf("%s: requestRecorded is false right after setRequest", got[i].LogicalNetwork)
				}
			}
		})
	}
}
