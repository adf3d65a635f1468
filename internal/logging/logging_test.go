// SPDX-License-Identifier: Apache-2.0

package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestNewLevels(t *testing.T) {
	for _, tt := range []struct {
		level                  string
		debug, info, warn, err bool
	}{
		{"debug", true, true, true, true},
		{"info", false, true, true, true},
		{"warn", false, false, true, true},
		{"error", false, false, false, true},
	} {
		var b bytes.Buffer
		log, err := New(&b, tt.level)
		if err != nil {
			t.Fatalf("New(%q): %v", tt.level, err)
		}
		log.V(1).Info("d")
		log.Info("i", "k", "v")
		Warn(log, "w", "k", "v")
		log.Error(errors.New("boom"), "e")
		got := map[string]bool{}
		for _, m := range lines(t, &b) {
			got[m["msg"].(string)] = true
			want := map[any]string{"d": "DEBUG", "i": "INFO", "w": "WARN", "e": "ERROR"}[m["msg"]]
			if m["level"] != want {
				t.Errorf("level %s: line %v has level %v, want %s", tt.level, m["msg"], m["level"], want)
			}
		}
		if got["d"] != tt.debug || got["i"] != tt.info || got["w"] != tt.warn || got["e"] != tt.err {
			t.Errorf("level %s: logged %v, want debug=%v info=%v warn=%v error=%v", tt.level, got, tt.debug, tt.info, tt.warn, tt.err)
		}
	}
}

// lines decodes b's JSON lines.
func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestWarnThroughControllerRuntime: the controllers log through
// controller-runtime's delegating logger, which must pass a warning on
// as one, with the logger's name and values.
func TestWarnThroughControllerRuntime(t *testing.T) {
	var b bytes.Buffer
	root, err := New(&b, "warn")
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(root)
	log := ctrllog.Log.WithName("gc").WithValues("pool", "blue")
	log.Info("i")
	Warn(log, "w", "k", "v")
	got := lines(t, &b)
	if len(got) != 1 {
		t.Fatalf("logged %v, want the warning alone", got)
	}
	if m := got[0]; m["msg"] != "w" || m["level"] != "WARN" || m["logger"] != "gc" || m["pool"] != "blue" || m["k"] != "v" {
		t.Errorf("logged %v, want msg w at WARN with logger gc, pool blue and k v", m)
	}
}

func TestNewRejectsUnknownLevel(t *testing.T) {
	_, err := New(&bytes.Buffer{}, "verbose")
	if err == nil || !strings.Contains(err.Error(), `"verbose"`) || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("New(verbose) = %v, want an error naming the flag and the value", err)
	}
}
