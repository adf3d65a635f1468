// SPDX-License-Identifier: Apache-2.0

// Package logging builds the one logger of ipkeeper's binaries.
//
// The code logs through the logr API, the one controller-runtime and
// client-go speak, so the agent, the controller and the libraries under
// them share a logger and its level. The sink is log/slog's JSON handler,
// one JSON object per line on stderr.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/go-logr/logr"
)

// Levels are the values --log-level accepts: "debug" adds logr's V(1)
// lines, "info" is the default, "warn" keeps warnings (Warn) and errors,
// "error" keeps only errors.
var Levels = []string{"debug", "info", "warn", "error"}

// warnV is the logr verbosity that logr's slog bridge logs at
// slog.LevelWarn: it logs V(n) at slog level -n.
const warnV = -int(slog.LevelWarn)

// Warn logs a warning on log: something a person should fix, which
// ipkeeper works around meanwhile. logr has no warning level and its V
// clamps negative verbosities to 0, so Warn hands the sink verbosity
// warnV itself; sinks that wrap another, such as controller-runtime's
// delegating logger, pass it on unchanged. The logger's own V is ignored:
// a warning is never debug output.
func Warn(log logr.Logger, msg string, keysAndValues ...any) {
	sink := log.GetSink()
	if sink == nil || !sink.Enabled(warnV) {
		return
	}
	if h, ok := sink.(logr.CallStackHelperLogSink); ok {
		h.GetCallStackHelper()()
	}
	sink.Info(warnV, msg, keysAndValues...)
}

// New returns a JSON logger on w at level (one of Levels).
func New(w io.Writer, level string) (logr.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return logr.Discard(), fmt.Errorf("--log-level %q: want one of %v", level, Levels)
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: levelNames})), nil
}

// levelNames prints logr's V(n) lines (slog levels -n) as DEBUG rather
// than slog's "DEBUG+3"; errors are logged under "err" by logr's bridge.
func levelNames(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelInfo {
			a.Value = slog.StringValue("DEBUG")
		}
	}
	return a
}

// Text returns a human-readable logger on w at info level, for tests and
// tools whose output a person reads.
func Text(w io.Writer) logr.Logger {
	return logr.FromSlogHandler(slog.NewTextHandler(w, nil))
}
