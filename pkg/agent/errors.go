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
