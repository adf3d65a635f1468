// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"sync"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/logging"
)

// lineWriter keeps each write, one log line, for a test to read while
// the agent may still log.
type lineWriter struct {
	mu    sync.Mutex
	lines []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, string(p))
	return len(p), nil
}

func (w *lineWriter) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// The agent warns, in its log, of the ipam keys a network's configuration
// sets that ipkeeper does not know, with the key each is closest to, once
// per network (a warning, so --log-level warn keeps it); and refuses,
// with CNI code 7 before reserving anything, the configuration whose
// misspelt key would let the gateway or an exclude be handed out.
func TestUnknownKeysAreLoggedOrRefused(t *testing.T) {
	f := newClaimFixture(t)
	out := &lineWriter{}
	log, err := logging.New(out, "warn")
	if err != nil {
		t.Fatal(err)
	}
	f.a.log = log
	f.claims.put(f.claim)
	f.fill("10.0.0.5/24", "fd00::5/120")

	misspelt := strings.Replace(claimConf, `"type":"ipkeeper",`, `"type":"ipkeeper","sticky_mca":true,"log_level":"debug",`, 1)
	for range 2 {
		if _, err := f.add(misspelt, "sandbox-1"); err != nil {
			t.Fatalf("ADD with an unknown key that guards nothing: %v", err)
		}
	}
	lines := out.all()
	var told []string
	for _, l := range lines {
		if strings.Contains(l, "sticky_mca") {
			told = append(told, l)
		}
	}
	if len(told) != 1 {
		t.Fatalf("log lines naming the unknown key: %q, want one (lines %q)", told, lines)
	}
	for _, w := range []string{`ipam.sticky_mca (did you mean \"sticky_mac\"?)`, `"network":"blue"`, `"level":"WARN"`} {
		if !strings.Contains(told[0], w) {
			t.Errorf("log line %q lacks %q", told[0], w)
		}
	}

	gatway := strings.Replace(claimConf, `"type":"ipkeeper",`, `"type":"ipkeeper","gatway":"10.0.0.1",`, 1)
	_, err = f.add(gatway, "sandbox-2")
	if c := cniCodeOf(err); c != codeInvalidConfig {
		t.Fatalf("ADD with gatway = %v (code %d), want CNI code 7", err, c)
	}
	mustContainAll(t, err, `ipam.gatway: unknown key; did you mean "gateway"?`)
	f.checkReadOnly(t)
}
