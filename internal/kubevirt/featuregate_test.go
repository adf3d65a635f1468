// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func kv(gates ...string) *kubevirtv1.KubeVirt {
	k := &kubevirtv1.KubeVirt{}
	k.Spec.Configuration.DeveloperConfiguration = &kubevirtv1.DeveloperConfiguration{FeatureGates: gates}
	return k
}

// KubeVirt rewrites its CR's status often; only a change of the gate may
// re-queue every VM.
func TestGateChanged(t *testing.T) {
	statusOnly := kv(PersistentIPsGate)
	statusOnly.Status.Phase = kubevirtv1.KubeVirtPhaseDeployed
	tests := []struct {
		name     string
		old, new *kubevirtv1.KubeVirt
		want     bool
	}{
		{"status update", kv(PersistentIPsGate), statusOnly, false},
		{"other gate added", kv(PersistentIPsGate), kv(PersistentIPsGate, "LiveMigration"), false},
		{"gate turned on", kv("LiveMigration"), kv("LiveMigration", PersistentIPsGate), true},
		{"gate turned off", kv(PersistentIPsGate), kv(), true},
	}
	p := GateChanged()
	for _, tt := range tests {
		if got := p.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}); got != tt.want {
			t.Errorf("%s: GateChanged = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: kv()}) || !p.Delete(event.DeleteEvent{Object: kv()}) {
		t.Error("creation and deletion of the CR must pass")
	}
}
