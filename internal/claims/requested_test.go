// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"strings"
	"testing"
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
		// claim annotation value per network, "" for no request
		blue, red string
		errPart   string
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withRequests(want(), tt.annotations)
			for i, w := range []string{tt.blue, tt.red} {
				r := got[i].Request
				if (r == nil) != (w == "") || (r != nil && r.claimValue() != w) {
					t.Fatalf("%s request = %+v, want %q", got[i].LogicalNetwork, r, w)
				}
				if r != nil && tt.errPart != "" && (r.err == nil || !strings.Contains(r.err.Error(), tt.errPart)) {
					t.Fatalf("%s request error = %v, want %q", got[i].LogicalNetwork, r.err, tt.errPart)
				}
			}
		})
	}
}
