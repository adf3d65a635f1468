// SPDX-License-Identifier: Apache-2.0

package multus

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseAndRewriteKeepsUnknownFields(t *testing.T) {
	in := `[{"name":"blue","namespace":"vms","interface":"pod16477688c0e","mac":"02:00:00:00:00:01","x-extra":{"a":1}},{"name":"red"}]`
	elems, err := ParseElements(in, "vms")
	if err != nil {
		t.Fatal(err)
	}
	if len(elems) != 2 || elems[0].Interface != "pod16477688c0e" || elems[1].Namespace != "vms" {
		t.Fatalf("ParseElements() = %+v", elems)
	}
	elems[0].SetClaimRef("vm1.blue")
	out, err := MarshalElements(elems)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got[0]["ipam-claim-reference"] != "vm1.blue" || got[0]["mac"] != "02:00:00:00:00:01" || !reflect.DeepEqual(got[0]["x-extra"], map[string]any{"a": 1.0}) {
		t.Errorf("rewrite lost or mangled fields: %s", out)
	}
	if _, ok := got[1]["ipam-claim-reference"]; ok {
		t.Errorf("second element got a reference: %s", out)
	}
	if refs := ClaimRefs(out, "vms"); !reflect.DeepEqual(refs, []string{"vm1.blue"}) {
		t.Errorf("ClaimRefs() = %v", refs)
	}
}

func TestParseShortForm(t *testing.T) {
	elems, err := ParseElements("other/blue@eth1, red", "vms")
	if err != nil {
		t.Fatal(err)
	}
	if len(elems) != 2 || elems[0].Namespace != "other" || elems[0].Name != "blue" || elems[0].Interface != "eth1" || elems[1].Namespace != "vms" {
		t.Fatalf("ParseElements() = %+v", elems)
	}
}

func TestParseErrorsNameTheProblem(t *testing.T) {
	tests := map[string]string{
		`[{"name":`:           "not a JSON list",
		`[{"name":7}]`:        `element 0: field "name": want a string, got 7`,
		`[{"namespace":"x"}]`: `element 0: field "name" is missing`,
		`[{"name":"a","ipam-claim-reference":true}]`: `field "ipam-claim-reference": want a string`,
		`{"name":"a"}`: "k8s.v1.cni.cncf.io/networks",
	}
	for in, want := range tests {
		if _, err := ParseElements(in, "vms"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseElements(%s) error = %v, want it to contain %q", in, err, want)
		}
	}
	if refs := ClaimRefs(`[{"name":`, "vms"); refs != nil {
		t.Errorf("ClaimRefs(malformed) = %v, want none", refs)
	}
}

func FuzzParseElements(f *testing.F) {
	f.Add(`[{"name":"blue","interface":"pod1","ipam-claim-reference":"vm.blue"}]`)
	f.Add("ns/a@b, c")
	f.Fuzz(func(t *testing.T, in string) {
		elems, err := ParseElements(in, "vms")
		if err != nil {
			return
		}
		for i := range elems {
			elems[i].SetClaimRef("c")
		}
		out, err := MarshalElements(elems)
		if err != nil {
			t.Fatalf("Marshal after ParseElements(%q): %v", in, err)
		}
		again, err := ParseElements(out, "vms")
		if err != nil || len(again) != len(elems) {
			t.Fatalf("round trip of %q: %q, %v", in, out, err)
		}
		for i := range again {
			if again[i].ClaimRef != "c" || again[i].Name != elems[i].Name {
				t.Fatalf("round trip changed element %d: %+v vs %+v", i, again[i], elems[i])
			}
		}
	})
}

func TestNewElement(t *testing.T) {
	e := NewElement("vms", "blue", "pod1")
	e.SetClaimRef("vm1.blue")
	out, err := MarshalElements([]Element{e, NewElement("other", "red", "")})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"interface":"pod1","ipam-claim-reference":"vm1.blue","name":"blue","namespace":"vms"},{"name":"red","namespace":"other"}]`
	if out != want {
		t.Fatalf("MarshalElements() = %s, want %s", out, want)
	}
	again, err := ParseElements(out, "x")
	if err != nil || len(again) != 2 || again[0].NAD().String() != "vms/blue" || again[0].Interface != "pod1" || again[0].ClaimRef != "vm1.blue" || again[1].Interface != "" {
		t.Fatalf("ParseElements(%s) = %+v, %v", out, again, err)
	}
}

func TestMarshalNoElements(t *testing.T) {
	if out, err := MarshalElements(nil); err != nil || out != "[]" {
		t.Fatalf("MarshalElements(nil) = %q, %v; want []", out, err)
	}
}
