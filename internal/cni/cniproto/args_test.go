// SPDX-License-Identifier: Apache-2.0

package cniproto

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    *CNIArgs
		wantErr string // substring; "" means success
	}{
		{name: "empty", in: "", want: &CNIArgs{}},
		{
			name: "multus",
			in:   "IgnoreUnknown=true;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=u-1",
			want: &CNIArgs{IgnoreUnknown: true, PodNamespace: "ns1", PodName: "web-0", InfraContainerID: "abc123", PodUID: "u-1"},
		},
		{
			name: "unknown kept when ignored, trailing separator",
			in:   "FOO=bar=baz;IgnoreUnknown=1;K8S_POD_NAME=p;",
			want: &CNIArgs{IgnoreUnknown: true, PodName: "p", Unknown: map[string]string{"FOO": "bar=baz"}},
		},
		{name: "identical duplicate", in: "K8S_POD_NAME=p;K8S_POD_NAME=p", want: &CNIArgs{PodName: "p"}},
		{name: "unknown not ignored", in: "K8S_POD_NAME=p;FOO=bar", wantErr: `entry "FOO"="bar": unknown key`},
		{name: "unknown explicitly not ignored", in: "IgnoreUnknown=false;FOO=bar", wantErr: `"FOO"="bar"`},
		{name: "missing equals", in: "K8S_POD_NAME=p;garbage", wantErr: `entry "garbage"="": missing "="`},
		{name: "empty key", in: "=v", wantErr: `entry ""="v": empty key`},
		{name: "bad bool", in: "IgnoreUnknown=yes", wantErr: `entry "IgnoreUnknown"="yes": not a boolean`},
		// What Multus hands its delegates: the runtime's args plus its own.
		{name: "IgnoreUnknown twice, spelled differently (Multus)", in: "IgnoreUnknown=1;K8S_POD_NAME=p;IgnoreUnknown=true;K8S_POD_UID=u", want: &CNIArgs{IgnoreUnknown: true, PodName: "p", PodUID: "u"}},
		{name: "IgnoreUnknown contradicting itself", in: "IgnoreUnknown=1;IgnoreUnknown=false", wantErr: `key repeated with a different value (first was "1")`},
		{name: "conflicting duplicate", in: "K8S_POD_NAME=a;K8S_POD_NAME=b", wantErr: `entry "K8S_POD_NAME"="b": key repeated with a different value (first was "a")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseArgs(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				var ae *ArgsError
				if !errors.As(err, &ae) {
					t.Fatalf("error %T is not an *ArgsError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseArgs(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestArgsErrorTruncatesLongValues(t *testing.T) {
	_, err := ParseArgs("IgnoreUnknown=" + strings.Repeat("x", 10000))
	if err == nil {
		t.Fatal("want an error for a non-boolean IgnoreUnknown")
	}
	if n := len(err.Error()); n > 400 {
		t.Fatalf("error message is %d bytes, want it truncated: %.100s...", n, err)
	}
}

func TestRequirePod(t *testing.T) {
	a, _ := ParseArgs("K8S_POD_NAMESPACE=ns")
	err := a.RequirePod()
	if err == nil || !strings.Contains(err.Error(), "K8S_POD_NAME") || strings.Contains(err.Error(), "K8S_POD_NAMESPACE") {
		t.Fatalf("RequirePod() = %v, want it to name only K8S_POD_NAME", err)
	}
	a.PodName = "p"
	if err := a.RequirePod(); err != nil {
		t.Fatalf("RequirePod() = %v", err)
	}
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"",
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u",
		"A=B;IgnoreUnknown=true",
		";;=;==;K8S_POD_NAME=a;K8S_POD_NAME=b",
		"IgnoreUnknown=TRUE;x=\x00\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseArgs(in)
		if err != nil {
			var ae *ArgsError
			if !errors.As(err, &ae) {
				t.Fatalf("error %T is not an *ArgsError: %v", err, err)
			}
			// The message must point at the offending entry.
			if !strings.Contains(err.Error(), quoteTrunc(ae.Key)) || !strings.Contains(in, ae.Key) {
				t.Fatalf("error %q does not name key %q from input %q", err, ae.Key, in)
			}
			return
		}
		// Canonical form must parse back to the same value.
		again, err := ParseArgs(got.String())
		if err != nil {
			t.Fatalf("re-parsing %q (from %q): %v", got.String(), in, err)
		}
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("round trip of %q: %+v != %+v", in, got, again)
		}
	})
}
