// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"encoding/json"
	"time"
)

// Duration is a Go duration string ("30s", "5m", "1h30m"). The API server
// refuses a malformed one (the field's validation rule); one stored before
// that rule existed still decodes, as Invalid, instead of failing the
// decode of every list and watch of its kind: readers report that one
// object and keep serving the others.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
type Duration struct {
	time.Duration `json:"-"`
	// Invalid is the value as written when it is not a duration; Duration
	// is then 0.
	Invalid string `json:"-"`
}

// UnmarshalJSON implements json.Unmarshaler; it never fails on a string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		*d = Duration{Invalid: string(b)}
		return nil //nolint:nilerr // kept as Invalid, reported by the readers
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		*d = Duration{Invalid: s}
		return nil //nolint:nilerr // kept as Invalid, reported by the readers
	}
	*d = Duration{Duration: v}
	return nil
}

// MarshalJSON implements json.Marshaler: the value as written when
// invalid, so a read-modify-write keeps it.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Invalid != "" {
		return json.Marshal(d.Invalid)
	}
	return json.Marshal(d.String())
}

// ToUnstructured implements the value.UnstructuredConverter interface.
func (d Duration) ToUnstructured() any {
	if d.Invalid != "" {
		return d.Invalid
	}
	return d.String()
}
