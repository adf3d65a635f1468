// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The expected names are KubeVirt's own: sha256("blue") starts 16477688c0e0...
func TestPodInterfaceName(t *testing.T) {
	tests := map[string]string{
		"blue": "pod16477688c0e",
		"red":  "podb1f51a511f1",
	}
	for network, want := range tests {
		if got := PodInterfaceName(network); got != want {
			t.Errorf("PodInterfaceName(%q) = %q, want %q", network, got, want)
		}
		if len(PodInterfaceName(network)) > 15 {
			t.Errorf("PodInterfaceName(%q) longer than IFNAMSIZ-1", network)
		}
	}
}

func TestSecondaryNetworks(t *testing.T) {
	spec := &kubevirtv1.VirtualMachineInstanceSpec{
		Networks: []kubevirtv1.Network{
			{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}},
			{Name: "primary", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "ovn", Default: true}}},
			{Name: "blue", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "blue-nad"}}},
			{Name: "red", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "other/red-nad"}}},
		},
	}
	spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "blue"}, {Name: "red", State: kubevirtv1.InterfaceStateAbsent}}
	got := SecondaryNetworks(spec)
	want := []SecondaryNetwork{
		{Name: "blue", NetworkName: "blue-nad", Ordinal: 1},
		{Name: "red", NetworkName: "other/red-nad", Absent: true, Ordinal: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("SecondaryNetworks() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("network %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if SecondaryNetworks(nil) != nil {
		t.Error("SecondaryNetworks(nil) should be empty")
	}
}
