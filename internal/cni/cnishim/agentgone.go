// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// AgentGoneAfter is how long the agent must have been unreachable before
// DEL succeeds without it.
//
// Why DEL may succeed at all: with the agent gone for good (ipkeeper
// uninstalled, the DaemonSet removed from a node) every DEL would answer
// "try again later" forever and pods would hang in Terminating. Nothing
// leaks by letting go: a pod's reservation is released by the controller's
// garbage collector once the pod no longer exists, and a claim's is kept
// by DEL anyway. Why not at once: an agent that is only restarting
// releases the address immediately, so DEL keeps failing for a while.
const AgentGoneAfter = 3 * time.Minute

// The shim is exec'd once per call and keeps no memory, so "unreachable
// since" lives next to the socket: a marker file created by the first call
// that finds the agent unreachable, its modification time being that
// moment. A socket newer than the marker means the agent started again
// since (and has crashed again, or it would have answered): the clock
// restarts. Any call the agent answers removes the marker.
func goneMarker(sock string) string { return sock + ".unreachable-since" }

// agentGone reports whether the agent at sock, which just failed to
// answer with err, has been unreachable for longer than AgentGoneAfter,
// and since when.
func agentGone(sock string, err error, now time.Time) (bool, time.Time) {
	var ue *cniproto.UnavailableError
	if !errors.As(err, &ue) || (!errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED)) {
		return false, time.Time{} // running but slow, or not permitted: not gone
	}
	marker := goneMarker(sock)
	st, statErr := os.Stat(marker)
	restarted := false
	if statErr == nil {
		if sst, err := os.Stat(sock); err == nil && sst.ModTime().After(st.ModTime()) {
			restarted = true
		}
	}
	if statErr != nil || restarted {
		// First sight of the outage (or of a new one): start the clock. A
		// marker that cannot be written keeps DEL failing, as before.
		if f, err := os.OpenFile(marker, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil { //nolint:gosec // next to the socket the network config names, by design
			_ = f.Close()
			_ = os.Chtimes(marker, now, now)
		}
		return false, now
	}
	since := st.ModTime()
	return now.Sub(since) >= AgentGoneAfter, since
}

// agentAnswered clears the outage marker. A failure is ignored: a stale
// marker only shortens the next outage's wait.
func agentAnswered(sock string) { _ = os.Remove(goneMarker(sock)) }

// warnAgentGone says on stderr (the runtime's log) why DEL succeeded.
func warnAgentGone(w io.Writer, sock string, since time.Time, args string) {
	fmt.Fprintf(w, "ipkeeper: WARNING: ipkeeper-agent at %s unreachable since %s (longer than %s); DEL succeeds without it (%s); "+
		"the controller's garbage collector releases the pod's addresses once the pod no longer exists\n",
		sock, since.UTC().Format(time.RFC3339), AgentGoneAfter, args)
}
