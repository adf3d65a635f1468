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

// failure is a failed allocation: a CNI error plus the reason it is
// counted under (and, for claims, reported in the IPsAllocated condition).
type failure struct {
	reason string // exhausted, conflict, invalid, pod, internal
	cni    *types.Error
}

func (f *failure) Error() string { return f.cni.Error() }
func (f *failure) Unwrap() error { return f.cni }

// fail counts a failed allocation and returns it as a CNI error.
func (a *Agent) fail(reason string, code uint, err error) error {
	a.metrics.failures.WithLabelValues(reason).Inc()
	return &failure{reason: reason, cni: &types.Error{Code: code, Msg: err.Error()}}
}

// failureReason returns the reason of a failure, "internal" for other errors.
func failureReason(err error) string {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return "internal"
}
