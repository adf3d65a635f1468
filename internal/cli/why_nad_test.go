// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// why tells of a NAD's ipam keys ipkeeper does not know, with the key
// each is closest to, as a fact of the network and a Next line; and of a
// misspelt key that would hand out the gateway or an exclude, which the
// agent refuses, as the problem to fix first.
func TestWhyTellsUnknownKeys(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	nad := func(name, ipam string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name}, Spec: nadv1.NetworkAttachmentDefinitionSpec{
			Config: `{"cniVersion":"1.0.0","name":"` + name + `","type":"bridge","ipam":{"type":"ipkeeper","range":"10.90.3.0/24",` + ipam + `}}`}}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		nad("clean", `"gateway":"10.90.3.1"`),
		nad("sticky", `"sticky_mca":true,"log_level":"debug"`),
		nad("gatway", `"gatway":"10.90.3.1"`),
	).Build()
	for _, tt := range []struct {
		nad                 string
		problem, line, next []string // parts of each; nil: empty
	}{
		{nad: "clean"},
		{nad: "sticky",
			line: []string{`ipam keys ipkeeper does not know (ignored): ipam.sticky_mca (did you mean "sticky_mac"?)`, "whereabouts keys ipkeeper ignores", "ipam.log_level"},
			next: []string{"NetworkAttachmentDefinition vms/sticky", `ipam.sticky_mca (did you mean "sticky_mac"?)`}},
		{nad: "gatway",
			problem: []string{"NetworkAttachmentDefinition vms/gatway", `ipam.gatway: unknown key; did you mean "gateway"?`}},
	} {
		t.Run(tt.nad, func(t *testing.T) {
			key := types.NamespacedName{Namespace: "vms", Name: tt.nad}
			nw, problem, err := readNAD(context.Background(), c, key)
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range []struct {
				what, s string
				want    []string
			}{{"problem", problem, tt.problem}, {"line", nw.ignoredLine(), tt.line}, {"next", nw.unknownNext(key), tt.next}} {
				if (got.s == "") != (got.want == nil) {
					t.Errorf("%s %q, want parts %q", got.what, got.s, got.want)
				}
				for _, w := range got.want {
					if !strings.Contains(got.s, w) {
						t.Errorf("%s %q lacks %q", got.what, got.s, w)
					}
				}
			}
		})
	}
}
