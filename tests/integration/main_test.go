// SPDX-License-Identifier: Apache-2.0

// Package integration runs ipkeeper's integration tests against a real local
// control plane: etcd, kube-apiserver, kube-controller-manager (garbage
// collector and namespace controllers) and KubeVirt's virt-controller,
// started once for the package. virt-controller acts on every namespace, so
// every VM of these tests is run through framework.KubeVirt.
//
// Files are named by the component under test, so a test is found by what
// it exercises:
//
//   - agent_: the node agent's CNI ADD/DEL/CHECK/GC/STATUS for pods, its
//     configuration checks and which pod may use an attachment;
//   - claims_: IPAMClaims, filled by ipkeeper-controller and read by the
//     agents (requested addresses, one holder, owner references);
//   - kubevirt_: VMs run by the real virt-controller (start, stop,
//     migration, hotplug, NAD swap, the feature gate);
//   - pools_, reservations_: IPPools and their status; reservations' lock,
//     garbage collection and reuse cooldown;
//   - capi_, cli_: the Cluster API provider, kubectl ipkeeper;
//   - controller_, webhook_: ipkeeper-controller's own machinery (webhook
//     certificates, leader election, optional APIs), the pod webhook;
//   - crds_: the shipped CRDs' validation and printer columns;
//   - install_: what is shipped (manifests, RBAC, image, monitoring,
//     OpenShift, next to foreign CRDs);
//   - security_: the threat model (admission policies, compromised node,
//     namespace user, TLS).
//
// Helpers used by more than one file are in helpers_<component>_test.go;
// one used by a single file stays next to its tests.
package integration

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	cp, err = framework.Start(context.Background(), framework.Options{VirtController: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		}
	}()
	return m.Run()
}
