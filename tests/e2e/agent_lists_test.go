// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestAgentsStreamTheirFirstList: an agent gets the cluster's reservations
// as a stream of watch events (client-go's WatchListClient), each trimmed
// as it arrives, not as one list response held whole. The kube-apiserver
// counts watch-list requests per resource; with the agents' streaming
// turned off (KUBE_FEATURE_WatchListClient=false) it counted one, from
// another client (the controller manager's garbage collector), so at
// least one per agent says the agents stream.
func TestAgentsStreamTheirFirstList(t *testing.T) {
	c := setup(t)
	raw, err := c.CP.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the kube-apiserver's metrics: %v", err)
	}
	const metric = "apiserver_watch_list_duration_seconds_count{"
	var streamed float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) || !strings.Contains(line, `group="ipkeeper.io"`) || !strings.Contains(line, `resource="ipreservations"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		streamed += v
	}
	if streamed < float64(len(c.Nodes)) {
		t.Errorf("the kube-apiserver served %.0f streamed lists of ipreservations, want at least one per agent (%d)", streamed, len(c.Nodes))
	}
}
