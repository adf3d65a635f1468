// SPDX-License-Identifier: Apache-2.0

// Command crdgen writes the CRD manifests ipkeeper ships or tests with that
// controller-gen cannot produce from this module's own types:
//
//   - IPAMClaim: the upstream manifest from the pinned ipamclaims module, plus
//     printer columns so `kubectl get ipamclaims` shows IPs, owner pod and
//     readiness;
//   - NetworkAttachmentDefinition: the upstream manifest from the pinned
//     network-attachment-definition-client module, unchanged;
//   - cert-manager's Certificate and Issuer, for tests only: minimal
//     structural CRDs (spec and status preserve unknown fields, status
//     subresource), so the cert-manager overlay applies with a dry run;
//   - Cluster API's IPAddressClaim, IPAddress and Cluster, for tests only:
//     the real manifests of the pinned cluster-api module, unchanged, so
//     the IPAM provider is tested against the schema it serves (ipkeeper
//     does not ship them: Cluster API installs its own).
//
// Run through `make generate`; the output is checked in and `make verify-generated`
// fails when it is stale.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	ipamClaimsModule = "github.com/k8snetworkplumbingwg/ipamclaims"
	nadModule        = "github.com/k8snetworkplumbingwg/network-attachment-definition-client"
	clusterAPIModule = "sigs.k8s.io/cluster-api"
)

// clusterAPICRDs are the Cluster API manifests the IPAM provider's tests use.
var clusterAPICRDs = []string{
	"ipam.cluster.x-k8s.io_ipaddressclaims.yaml",
	"ipam.cluster.x-k8s.io_ipaddresses.yaml",
	"cluster.x-k8s.io_clusters.yaml",
}

func main() {
	crdDir := flag.String("crd-dir", "manifests/crds", "directory for shipped CRDs")
	testCRDDir := flag.String("test-crd-dir", "tests/crds", "directory for test-only CRDs")
	flag.Parse()
	if err := run(*crdDir, *testCRDDir); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(crdDir, testCRDDir string) error {
	claims, err := readUpstreamCRD(ipamClaimsModule, "artifacts/k8s.cni.cncf.io_ipamclaims.yaml")
	if err != nil {
		return err
	}
	addIPAMClaimColumns(claims)
	if err := writeCRD(filepath.Join(crdDir, "k8s.cni.cncf.io_ipamclaims.yaml"), claims); err != nil {
		return err
	}
	nad, err := readUpstreamCRD(nadModule, "artifacts/networks-crd.yaml")
	if err != nil {
		return err
	}
	if err := writeCRD(filepath.Join(crdDir, "k8s.cni.cncf.io_network-attachment-definitions.yaml"), nad); err != nil {
		return err
	}
	for _, k := range certManagerKinds {
		crd := openCRD("cert-manager.io", k, "minimal structural stand-in for cert-manager's CRD, so the cert-manager overlay can be applied with a server-side dry run")
		if err := writeCRD(filepath.Join(testCRDDir, "cert-manager", "cert-manager.io_"+k.plural+".yaml"), crd); err != nil {
			return err
		}
	}
	for _, f := range clusterAPICRDs {
		crd, err := readUpstreamCRD(clusterAPIModule, filepath.Join("config", "crd", "bases", f))
		if err != nil {
			return err
		}
		if err := writeCRD(filepath.Join(testCRDDir, "cluster-api", f), crd); err != nil {
			return err
		}
	}
	return nil
}

// readUpstreamCRD reads a CRD manifest from the module version pinned in go.mod.
func readUpstreamCRD(module, path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return nil, fmt.Errorf("locating module %s (is it in go.mod and downloaded?): %w", module, err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), path)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading upstream CRD: %w", err)
	}
	// Some upstream files start with a document separator or comments.
	data = bytes.TrimPrefix(bytes.TrimSpace(data), []byte("---"))
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", file, err)
	}
	return crd, nil
}

func addIPAMClaimColumns(crd *apiextensionsv1.CustomResourceDefinition) {
	cols := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Network", Type: "string", JSONPath: ".spec.network"},
		{Name: "Interface", Type: "string", JSONPath: ".spec.interface"},
		{Name: "IPs", Type: "string", JSONPath: ".status.ips"},
		{Name: "Owner-Pod", Type: "string", JSONPath: ".status.ownerPod.name"},
		{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="IPsAllocated")].status`},
		{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="IPsAllocated")].reason`, Priority: 1},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].AdditionalPrinterColumns = cols
	}
}

// crdKind names the kind of a minimal test CRD.
type crdKind struct {
	kind, listKind, plural, singular string
	shortNames                       []string
}

// certManagerKinds are the cert-manager kinds the cert-manager overlay uses.
var certManagerKinds = []crdKind{
	{"Certificate", "CertificateList", "certificates", "certificate", []string{"cert", "certs"}},
	{"Issuer", "IssuerList", "issuers", "issuer", nil},
}

// openCRD is a minimal structural CRD whose spec and status accept anything.
func openCRD(group string, k crdKind, note string) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	open := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        k.plural + "." + group,
			Annotations: map[string]string{"ipkeeper.io/test-only": note},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: k.kind, ListKind: k.listKind, Plural: k.plural, Singular: k.singular,
				ShortNames: k.shortNames, Categories: []string{"cert-manager"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": {Type: "string"},
						"kind":       {Type: "string"},
						"metadata":   {Type: "object"},
						"spec":       open,
						"status":     open,
					},
				}},
			}},
		},
	}
}

func writeCRD(path string, crd *apiextensionsv1.CustomResourceDefinition) error {
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	data, err := yaml.Marshal(crd)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", crd.Name, err)
	}
	// Drop the empty status and creationTimestamp the API types always carry.
	data = bytes.ReplaceAll(data, []byte("  creationTimestamp: null\n"), nil)
	if i := bytes.Index(data, []byte("\nstatus:\n")); i >= 0 {
		data = data[:i+1]
	}
	header := "# Code generated by hack/crdgen. DO NOT EDIT.\n---\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, append([]byte(header), data...), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
