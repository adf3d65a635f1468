// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"
)

// CNI error codes from the spec that the agent returns.
const (
	codeInvalidEnv    = types.ErrInvalidEnvironmentVariables // 4
	codeInvalidConfig = types.ErrInvalidNetworkConfig        // 7
	codeTryAgainLater = types.ErrTryAgainLater               // 11
	codeInternal      = types.ErrInternal                    // 999
)

// cniError wraps err as a CNI error with a code, keeping the message.
func cniError(code uint, err error) error {
	var ce *types.Error
	if errors.As(err, &ce) {
		return err
	}
	return &types.Error{Code: code, Msg: err.Error()}
}

// reason says why an ADD failed. It is the label of
// ipkeeper_agent_allocation_failures_total and picks the reason of a
// claim's IPsAllocated=False condition.
type reason string

const (
	reasonInvalid   reason = "invalid"   // the request or the network config
	reasonPod       reason = "pod"       // the pod could not be read or is not this request's
	reasonClaim     reason = "claim"     // the IPAMClaim could not be read or changed under the ADD
	reasonExhausted reason = "exhausted" // no free address in a range
	reasonQuota     reason = "quota"     // the namespace holds the pool's spec.maxAddressesPerNamespace
	reasonConflict  reason = "conflict"  // the address asked for is someone else's
	reasonInternal  reason = "internal"  // the API server or anything else
)

// failure is a failed ADD: a CNI error plus the reason it is counted under.
type failure struct {
	reason reason
	cni    *types.Error
}

func (f *failure) Error() string { return f.cni.Error() }
func (f *failure) Unwrap() error { return f.cni }

// fail returns err as a CNI error with a code and a reason. Failures are
// counted once, when the ADD returns (countFailure).
func fail(r reason, code uint, err error) error {
	return &failure{reason: r, cni: &types.Error{Code: code, Msg: err.Error()}}
}

// reasonOf returns the reason of a failure, internal for other errors.
func reasonOf(err error) reason {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return reasonInternal
}
