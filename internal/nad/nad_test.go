package nad

import (
	"errors"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func mk(config string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "blue"},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
}

func TestParse(t *testing.T) {
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
			got, err := Parse(mk(tt.config))
			if tt.wantErr != "" {
				var fe *Error
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &fe) {
					t.Fatalf("Parse() error = %v, want a *Error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestFlagProblem(t *testing.T) {
	n, err := Parse(mk(`{"name":"n","plugins":[{"type":"bridge","allowPersistentIPs":true}]}`))
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

func TestRef(t *testing.T) {
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
		got, err := Ref(tt.ref, "vms")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Ref(%q) error = %v, want it to contain %q", tt.ref, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("Ref(%q) = %v, %v; want %s", tt.ref, got, err, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"name":"n","allowPersistentIPs":true}`)
	f.Add(`{"name":7}`)
	f.Add(`{"plugins":[]}`)
	f.Fuzz(func(t *testing.T, config string) {
		got, err := Parse(mk(config))
		if err != nil {
			var fe *Error
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

func FuzzRef(f *testing.F) {
	f.Add("ns/name")
	f.Fuzz(func(t *testing.T, ref string) {
		got, err := Ref(ref, "vms")
		if err == nil && (got.Name == "" || got.Namespace == "") {
			t.Fatalf("Ref(%q) = %v without error", ref, got)
		}
	})
}
