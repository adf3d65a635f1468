// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestOpenShiftSCCRolesGrantOnlyTheirSCC applies the Roles and
// RoleBindings the OpenShift overlay adds (manifests/overlays/openshift,
// scc.yaml) and asks the API server's authorizer, with the
// SubjectAccessReviews OpenShift's SCC admission makes, what each
// ServiceAccount may use: the agent the `privileged` SCC and the
// controller `nonroot-v2`, for pods of ipkeeper-system only, and nothing
// else through them (no other SCC, no other verb, no other namespace, no
// other ServiceAccount). No OpenShift runs here: the SCCs themselves are
// not objects of this API server, which the authorizer does not need.
func TestOpenShiftSCCRolesGrantOnlyTheirSCC(t *testing.T) {
	ctx := context.Background()
	applyRBAC(t)
	rendered, err := cp.Kubectl(ctx, nil, "kustomize", repoPath(t, "manifests", "overlays", "openshift"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeObjects(rendered)
	if err != nil {
		t.Fatal(err)
	}
	var scc []string
	var docs [][]byte
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		name, _ := o["metadata"].(map[string]any)["name"].(string)
		if (kind == "Role" || kind == "RoleBinding") && strings.HasSuffix(name, "-scc") {
			scc = append(scc, kind+"/"+name)
			doc, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, doc)
		}
	}
	if len(scc) != 4 {
		t.Fatalf("the OpenShift overlay has SCC Roles and RoleBindings %v; want a Role and a RoleBinding for each ServiceAccount", scc)
	}
	if _, err := cp.Kubectl(ctx, bytes.Join(docs, []byte("\n---\n")), "apply", "--server-side", "--field-manager=ipkeeper-install", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, obj := range scc {
			kind, name, _ := strings.Cut(obj, "/")
			_, _ = cp.Kubectl(context.Background(), nil, "-n", installNS, "delete", "--ignore-not-found", strings.ToLower(kind)+".rbac.authorization.k8s.io", name)
		}
	})

	other := cp.NewNamespace(t, "scc")
	may := func(sa, verb, ns, sccName string) bool {
		t.Helper()
		user, groups := framework.ServiceAccountUser(installNS, sa)
		review, err := cp.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: verb, Group: "security.openshift.io", Resource: "securitycontextconstraints", Name: sccName,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	tests := []struct {
		sa, verb, ns, scc string
		want              bool
	}{
		{"ipkeeper-agent", "use", installNS, "privileged", true},
		{"ipkeeper-controller", "use", installNS, "nonroot-v2", true},
		// Only their own SCC.
		{"ipkeeper-agent", "use", installNS, "anyuid", false},
		{"ipkeeper-agent", "use", installNS, "nonroot-v2", false},
		{"ipkeeper-controller", "use", installNS, "privileged", false},
		{"ipkeeper-controller", "use", installNS, "hostaccess", false},
		// For pods of ipkeeper-system only: a Role, not a ClusterRole.
		{"ipkeeper-agent", "use", other, "privileged", false},
		{"ipkeeper-controller", "use", other, "nonroot-v2", false},
		// Using is all: never changing the SCC.
		{"ipkeeper-agent", "update", installNS, "privileged", false},
		{"ipkeeper-agent", "delete", "", "privileged", false},
		{"ipkeeper-agent", "use", "", "privileged", false},
		// Any other ServiceAccount of the namespace gets nothing.
		{"default", "use", installNS, "privileged", false},
		{"default", "use", installNS, "nonroot-v2", false},
	}
	for _, tc := range tests {
		if got := may(tc.sa, tc.verb, tc.ns, tc.scc); got != tc.want {
			t.Errorf("%s may %s SCC %s in namespace %q: %v, want %v", tc.sa, tc.verb, tc.scc, tc.ns, got, tc.want)
		}
	}
}
