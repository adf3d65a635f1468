// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"log/slog"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime, which without a logger prints
	// a warning with a stack trace. Show its errors only.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	os.Exit(m.Run())
}
