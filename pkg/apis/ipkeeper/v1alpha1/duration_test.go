// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"encoding/json"
	"testing"
	"time"
)

// One pool whose reuseCooldown is not a duration (stored before the
// field's validation rule existed) decodes: a list or watch of every pool
// is not failed by it, and the value is kept as written.
func TestPoolListWithAMalformedCooldownDecodes(t *testing.T) {
	raw := `{"items":[` +
		`{"metadata":{"name":"bad"},"spec":{"ranges":[{"range":"10.0.0.0/24"}],"reuseCooldown":"30 seconds"}},` +
		`{"metadata":{"name":"good"},"spec":{"ranges":[{"range":"10.1.0.0/24"}],"reuseCooldown":"1m30s"}}]}`
	var l IPPoolList
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatalf("a list with one malformed pool: %v", err)
	}
	if len(l.Items) != 2 {
		t.Fatalf("%d pools decoded, want 2", len(l.Items))
	}
	if d := l.Items[0].Spec.ReuseCooldown; d == nil || d.Invalid != "30 seconds" || d.Duration != 0 {
		t.Errorf("malformed cooldown decoded as %+v, want Invalid %q", d, "30 seconds")
	}
	if d := l.Items[1].Spec.ReuseCooldown; d == nil || d.Invalid != "" || d.Duration != 90*time.Second {
		t.Errorf("1m30s decoded as %+v", d)
	}
	for _, tt := range []struct{ in, want string }{{`"30 seconds"`, `"30 seconds"`}, {`"90s"`, `"1m30s"`}, {`"-5m"`, `"-5m"`}, {`42`, `"42"`}} {
		var d Duration
		if err := json.Unmarshal([]byte(tt.in), &d); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if out, err := json.Marshal(d); err != nil || string(out) != tt.want {
			t.Errorf("%s round-trips as %s (%v), want %s", tt.in, out, err, tt.want)
		}
	}
}
