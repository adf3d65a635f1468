// SPDX-License-Identifier: Apache-2.0

package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestNewLevels(t *testing.T) {
	for _, tt := range []struct {
		level            string
		debug, info, err bool
	}{
		{"debug", true, true, true},
		{"info", false, true, true},
		{"error", false, false, true},
	} {
		var b bytes.Buffer
		log, err := New(&b, tt.level)
		if err != nil {
			t.Fatalf("New(%q): %v", tt.level, err)
		}
		log.V(1).Info("d")
		log.Info("i", "k", "v")
		log.Error(errors.New("boom"), "e")
		got := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("level %s: line %q is not JSON: %v", tt.level, line, err)
			}
			got[m["msg"].(string)] = true
			if m["msg"] == "d" && m["level"] != "DEBUG" {
				t.Errorf("a V(1) line has level %v, want DEBUG", m["level"])
			}
		}
		if got["d"] != tt.debug || got["i"] != tt.info || got["e"] != tt.err {
			t.Errorf("level %s: logged %v, want debug=%v info=%v error=%v", tt.level, got, tt.debug, tt.info, tt.err)
		}
	}
}

func TestNewRejectsUnknownLevel(t *testing.T) {
	_, err := New(&bytes.Buffer{}, "verbose")
	if err == nil || !strings.Contains(err.Error(), `"verbose"`) || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("New(verbose) = %v, want an error naming the flag and the value", err)
	}
}
