// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import "fmt"

// FieldError is the error Parse returns for a missing or invalid value.
// Field is the JSON path of the offending key (e.g.
// "ipam.ipRanges[1].range_start"); the message names the field and the value.
type FieldError struct {
	Field string
	msg   string
	cause error
}

func (e *FieldError) Error() string { return e.msg }

// Unwrap returns the underlying cause (such as a *json.SyntaxError), if any.
func (e *FieldError) Unwrap() error { return e.cause }

// fieldErr builds a FieldError whose message is field followed by the
// formatted detail. Detail starts with ": " or " " so messages read either
// `ipam.range: invalid CIDR "x"` or `ipam.range_start "x" is outside ...`.
func fieldErr(field, detail string, args ...any) error {
	return causedErr(nil, field, detail, args...)
}

// causedErr is fieldErr that also records the error that caused it.
func causedErr(cause error, field, detail string, args ...any) error {
	return &FieldError{Field: field, msg: field + fmt.Sprintf(detail, args...), cause: cause}
}
