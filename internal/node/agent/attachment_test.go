// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// TestArgsClaimRef checks the fallback for setups without Multus'
// annotation: the reference in args.cni, under the same key as in the
// annotation's elements, read by the config parser.
func TestArgsClaimRef(t *testing.T) {
	config := func(args string) []byte {
		return []byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}` + args + `}`)
	}
	tests := []struct {
		name, args, want, wantErr string
		found                     bool
	}{
		{name: "none", args: ``},
		{name: "a claim", args: fmt.Sprintf(`,"args":{"cni":{%q:"vm1.blue"}}`, multus.ClaimRefKey), want: "vm1.blue", found: true},
		{name: "not a string", args: fmt.Sprintf(`,"args":{"cni":{%q:7}}`, multus.ClaimRefKey), wantErr: "args.cni." + multus.ClaimRefKey + ": expected a string"},
		{name: "malformed", args: `,"args":`, wantErr: "invalid JSON"},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "web"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseRequest(&cniproto.Request{Config: config(tt.args)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseRequest() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := (&Agent{}).attachmentOf(context.Background(), pod, req)
			if err != nil || got.claim != tt.want || got.found != tt.found || got.nad != nil {
				t.Fatalf("attachmentOf() = %+v, %v; want claim %q, found %v", got, err, tt.want, tt.found)
			}
		})
	}
}
