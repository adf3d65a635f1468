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
// lines, "info" is the default, "error" keeps only errors (logr has no
// warning level; "warn" is accepted and means the same as "error").
var Levels = []string{"debug", "info", "warn", "error"}

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
