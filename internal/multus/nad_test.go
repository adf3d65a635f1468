// SPDX-License-Identifier: Apache-2.0

package multus

import (
	"context"
	"errors"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func mk(config string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "blue"},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
}

func TestParseNAD(t *testing.T) {
	tests := []struct {
		name, config string
		want         Network
		wantErr      string // substring; "" means success
	}{
		{name: "plugin with flag", config: `{"cniVersion":"1.0.0","name":"tenant-blue","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper"}}`, want: Network{Name: "tenant-blue", AllowPersistentIPs: true}},
		{name: "conflist with flag", config: `{"cniVersion":"1.0.0","name":"tenant-blue","allowPersistentIPs":true,"plugins":[{"type":"bridge"}]}`, want: Network{Name: "tenant-blue", AllowPersistentIPs: true}},
		{name: "flag false", config: `{"name":"n","allowPersistentIPs":false}`, want: Network{Name: "n"}},
		{name: "no flag", config: `{"name":"n","type":"macvlan"}`, want: Network{Name: "n"}},
		{name: "flag only inside ipam is not the NAD's opt-in", config: `{"name":"n","ipam":{"allowPersistentIPs":true}}`,
			want: Network{Name: "n", IgnoredFlags: "spec.config.ipam.allowPersistentIPs"}},
		{name: "flag only in a conflist's plugin is ignored", config: `{"name":"n","plugins":[{"type":"bridge","allowPersistentIPs":true},{"type":"tuning","ipam":{"allowPersistentIPs":true}}]}`,
			want: Network{Name: "n", IgnoredFlags: "spec.config.plugins[0].allowPersistentIPs, spec.config.plugins[1].ipam.allowPersistentIPs"}},
		{name: "flag at the top and in a plugin", config: `{"name":"n","allowPersistentIPs":true,"plugins":[{"type":"bridge","allowPersistentIPs":true}]}`,
			want: Network{Name: "n", AllowPersistentIPs: true, IgnoredFlags: "spec.config.plugins[0].allowPersistentIPs"}},
		{name: "empty config reads a node file", config: "  ", want: Network{}},
		{name: "not json", config: `{"name":`, wantErr: "NetworkAttachmentDefinition ns/blue: spec.config: not a JSON object"},
		{name: "json array", config: `[1]`, wantErr: "spec.config: not a JSON object"},
		{name: "no name", config: `{"type":"bridge"}`, wantErr: "spec.config.name: missing"},
		{name: "name not string", config: `{"name":7}`, wantErr: "spec.config.name 7: must be a string"},
		{name: "blank name", config: `{"name":"  "}`, wantErr: `spec.config.name "  ": must not be empty`},
		{name: "flag not bool", config: `{"name":"n","allowPersistentIPs":"yes"}`, wantErr: `spec.config.allowPersistentIPs "yes": must be true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNAD(mk(tt.config))
			if tt.wantErr != "" {
				var fe *NADError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &fe) {
					t.Fatalf("ParseNAD() error = %v, want a *NADError containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseNAD() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestReadNAD(t *testing.T) {
	s := runtime.NewScheme()
	if err := nadv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	broken := mk(`{"name":7}`)
	broken.Name = "broken"
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(mk(`{"name":"tenant-blue","allowPersistentIPs":true}`), broken).Build()
	failing := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		},
	}).Build()
	tests := []struct {
		name      string
		reader    client.Reader
		nad       string
		want      Network
		wantFound bool
		wantErr   string
		nadErr    bool
	}{
		{name: "parsed", reader: c, nad: "blue", want: Network{Name: "tenant-blue", AllowPersistentIPs: true}, wantFound: true},
		{name: "missing is no error", reader: c, nad: "red"},
		{name: "unparsable", reader: c, nad: "broken", wantFound: true, wantErr: "spec.config.name 7", nadErr: true},
		{name: "read error", reader: failing, nad: "blue", wantErr: "reading NetworkAttachmentDefinition ns/blue: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := ReadNAD(context.Background(), tt.reader, types.NamespacedName{Namespace: "ns", Name: tt.nad})
			var fe *NADError
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) || errors.As(err, &fe) != tt.nadErr {
				t.Fatalf("ReadNAD() error = %v, want %q (a *NADError: %v)", err, tt.wantErr, tt.nadErr)
			}
			if got != tt.want || found != tt.wantFound {
				t.Fatalf("ReadNAD() = %+v, %v; want %+v, %v", got, found, tt.want, tt.wantFound)
			}
		})
	}
}

func TestFlagProblem(t *testing.T) {
	n, err := ParseNAD(mk(`{"name":"n","plugins":[{"type":"bridge","allowPersistentIPs":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := n.FlagProblem(); !strings.Contains(got, "spec.config.plugins[0].allowPersistentIPs, where it is ignored") || !strings.Contains(got, "top level") {
		t.Errorf("FlagProblem() = %q", got)
	}
	n.AllowPersistentIPs = true
	if got := n.FlagProblem(); got != "" {
		t.Errorf("FlagProblem() with the flag at the top = %q, want none", got)
	}
}

func TestNADRef(t *testing.T) {
	tests := []struct {
		ref, want, wantErr string
	}{
		{ref: "blue", want: "vms/blue"},
		{ref: "other/blue", want: "other/blue"},
		{ref: "a.b", want: "vms/a.b"},
		{ref: "", wantErr: `name ""`},
		{ref: "Other/blue", wantErr: `namespace "Other"`},
		{ref: "ns/", wantErr: `name ""`},
		{ref: "ns/a/b", wantErr: `name "a/b"`},
	}
	for _, tt := range tests {
		got, err := NADRef(tt.ref, "vms")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NADRef(%q) error = %v, want it to contain %q", tt.ref, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("NADRef(%q) = %v, %v; want %s", tt.ref, got, err, tt.want)
		}
	}
}

func FuzzParseNAD(f *testing.F) {
	f.Add(`{"name":"n","allowPersistentIPs":true}`)
	f.Add(`{"name":7}`)
	f.Add(`{"plugins":[]}`)
	f.Fuzz(func(t *testing.T, config string) {
		got, err := ParseNAD(mk(config))
		if err != nil {
			var fe *NADError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "ns/blue") {
				t.Fatalf("error %v does not name the NAD", err)
			}
			return
		}
		if got.AllowPersistentIPs && strings.TrimSpace(got.Name) == "" {
			t.Fatalf("persistent network without a name from %q", config)
		}
	})
}

func FuzzNADRef(f *testing.F) {
	f.Add("ns/name")
	f.Fuzz(func(t *testing.T, ref string) {
		got, err := NADRef(ref, "vms")
		if err == nil && (got.Name == "" || got.Namespace == "") {
			t.Fatalf("NADRef(%q) = %v without error", ref, got)
		}
	})
}

func TestPluginConfig(t *testing.T) {
	tests := []struct {
		name, config string
		want         string // "" when not found
		wantErr      string
	}{
		{name: "plugin using the IPAM", config: `{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`,
			want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`},
		{name: "conflist: the plugin gets the list's name and version", config: `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"tuning"},{"type":"bridge","ipam":{"type":"ipkeeper","pool":"p"}}]}`,
			want: `{"cniVersion":"1.0.0","ipam":{"type":"ipkeeper","pool":"p"},"name":"n","type":"bridge"}`},
		{name: "another IPAM", config: `{"name":"n","type":"bridge","ipam":{"type":"whereabouts"}}`},
		{name: "no IPAM", config: `{"name":"n","type":"bridge"}`},
		{name: "not json", config: `{"name":`, wantErr: "spec.config: not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := PluginConfig(mk(tt.config), "ipkeeper")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || found != (tt.want != "") || string(got) != tt.want {
				t.Fatalf("PluginConfig() = %s, %v, %v; want %s", got, found, err, tt.want)
			}
		})
	}
}
