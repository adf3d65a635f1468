// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

func resultIPs(t testing.TB, res *types100.Result) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, ipc := range res.IPs {
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			t.Fatalf("bad IP in result: %v", ipc.Address)
		}
		out = append(out, a.Unmap())
	}
	return out
}

// reservationsOf lists a network's reservations, live.
func reservationsOf(t testing.TB, network string) []ipkeeperv1alpha1.IPReservation {
	t.Helper()
	rs, err := framework.Reservations(context.Background(), cp.Client, network)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func cniCode(err error) uint {
	if ce, ok := err.(*types.Error); ok { //nolint:errorlint // the client returns it unwrapped
		return ce.Code
	}
	return 0
}

func mustContain(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got success", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q lacks %q", err, p)
		}
	}
}

func keyOf(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

func withRuntimeIPs(t testing.TB, conf []byte, ips ...string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["runtimeConfig"] = map[string]any{"ips": ips}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
