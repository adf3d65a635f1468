// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestCRDLimits keeps the exported limits and the generated CRD in step:
// the markers repeat the numbers, and a second copy drifts unless tested.
func TestCRDLimits(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "manifests", "crds", "ipkeeper.io_ipreservations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("want one version with a schema, got %d", len(crd.Spec.Versions))
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for field, want := range map[string]int64{"network": v1alpha1.NetworkMaxLength, "ip": v1alpha1.IPMaxLength} {
		got := spec.Properties[field].MaxLength
		if got == nil || *got != want {
			t.Errorf("CRD spec.%s maxLength = %v, the Go constant says %d", field, got, want)
		}
	}
	// ValidateIP is written for this rule; a change to it needs a look there.
	var rules []string
	for _, r := range spec.Properties["ip"].XValidations {
		rules = append(rules, r.Rule)
	}
	if !strings.Contains(strings.Join(rules, "\n"), "isIP(self) && ip.isCanonical(self)") {
		t.Errorf("spec.ip rules changed (%q); update ValidateIP to match", rules)
	}
}

func TestValidateIP(t *testing.T) {
	tests := []struct {
		ip string
		ok bool
	}{
		{"10.0.0.1", true},
		{"fd00::1", true},
		{"::10.0.0.1", true}, // IPv4-compatible, written ::a00:1: plain IPv6
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
		{"::ffff:10.0.0.1", false},
		{"fe80::1%eth0", false},
	}
	for _, tt := range tests {
		err := v1alpha1.ValidateIP(netip.MustParseAddr(tt.ip))
		if (err == nil) != tt.ok {
			t.Errorf("ValidateIP(%s) = %v, want ok=%v", tt.ip, err, tt.ok)
		}
	}
	if v1alpha1.ValidateIP(netip.Addr{}) == nil {
		t.Errorf("ValidateIP accepted the zero Addr")
	}
}
