// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the lab installs on its real nodes, each as its users install it:
// Multus' thin plugin from Multus' own DaemonSet manifest, and ipkeeper
// from manifests/ with only its image set (kustomize's images field, as
// docs/install.md says for a build of one's own). Images are imported into
// every node's containerd first: the lab has no registry.
const (
	// LabIpkeeperImage is the name `make test-nodes` gives `make image`.
	LabIpkeeperImage = "lab.ipkeeper.test/ipkeeper:dev"
	// labImageEnv names the image's docker-archive for linux/<arch>.
	labImageEnv = "IPKEEPER_LAB_IMAGE"
	// multusUpstreamImage is the image Multus' manifest names.
	multusUpstreamImage = "ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot"
	labInstallTimeout   = 3 * time.Minute
)

// InstallMultus applies Multus' thin-plugin DaemonSet (the module's
// deployments/multus-daemonset.yml, its image replaced by the lab's build
// of the same binaries) and waits until every node runs it and has its
// configuration, which Multus writes in front of the node's pod network.
func (cp *ControlPlane) InstallMultus(ctx context.Context, t testing.TB, nodes []*RealNode) {
	t.Helper()
	manifest := filepath.Join(filepath.Dir(cp.Tools.MultusThinEntrypoint), "multus-daemonset.yml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatalf("Multus' DaemonSet manifest (hack/tools.sh multus): %v", err)
	}
	if !bytes.Contains(data, []byte(multusUpstreamImage)) {
		t.Fatalf("%s no longer names %s: update the lab", manifest, multusUpstreamImage)
	}
	data = bytes.ReplaceAll(data, []byte(multusUpstreamImage), []byte(MultusImage))
	if out, err := cp.Kubectl(ctx, data, "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		t.Fatalf("applying Multus: %v\n%s", err, out)
	}
	cp.waitDaemonSet(ctx, t, "kube-system", "kube-multus-ds", len(nodes))
	for _, n := range nodes {
		n := n
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			found, err := filepath.Glob(filepath.Join(n.Dir, "fs/etc/cni/net.d/00-multus.conf*"))
			return err == nil && len(found) > 0, nil
		}); err != nil {
			t.Fatalf("Multus wrote no configuration on %s", n.Name)
		}
	}
}

// InstallIpkeeper imports `make image`'s archive into every node and
// applies manifests/ with the image set to it, then waits until the
// agent runs on every node and the controller's Deployment is available.
func (cp *ControlPlane) InstallIpkeeper(ctx context.Context, t testing.TB, nodes []*RealNode) {
	t.Helper()
	archive := os.Getenv(labImageEnv)
	if archive == "" {
		t.Fatalf("%s names no image archive: run the lane with `make test-nodes`, which builds it with make image", labImageEnv)
	}
	for _, n := range nodes {
		if err := n.ImportImages(ctx, archive); err != nil {
			t.Fatal(err)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	name, tag, _ := strings.Cut(LabIpkeeperImage, ":")
	overlay := t.TempDir()
	// kustomize takes a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(root, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: ghcr.io/ipkeeper/ipkeeper
    newName: %s
    newTag: %s
`, base, name, tag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered, err := cp.Kubectl(ctx, nil, "kustomize", overlay)
	if err != nil {
		t.Fatalf("rendering manifests/: %v", err)
	}
	if out, err := cp.Kubectl(ctx, rendered, "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		t.Fatalf("applying manifests/: %v\n%s", err, out)
	}
	cp.waitDaemonSet(ctx, t, "ipkeeper-system", "ipkeeper-agent", len(nodes))
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, labInstallTimeout, true, func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "ipkeeper-system", Name: "ipkeeper-controller"}, &d); err != nil {
			return false, nil
		}
		return d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas, nil
	}); err != nil {
		out, _ := cp.Kubectl(ctx, nil, "get", "pods", "-A", "-o", "wide")
		t.Fatalf("ipkeeper-controller not available after %s: %v\n%s", labInstallTimeout, err, out)
	}
}

// waitDaemonSet waits until a DaemonSet's pods are ready on want nodes.
func (cp *ControlPlane) waitDaemonSet(ctx context.Context, t testing.TB, ns, name string, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, labInstallTimeout, true, func(ctx context.Context) (bool, error) {
		ds, err := cp.Clientset.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return int(ds.Status.NumberReady) == want && ds.Status.UpdatedNumberScheduled == int32(want), nil
	})
	if err != nil {
		out, _ := cp.Kubectl(ctx, nil, "get", "pods", "-A", "-o", "wide")
		t.Fatalf("DaemonSet %s/%s not ready on %d nodes after %s: %v\n%s", ns, name, want, labInstallTimeout, err, out)
	}
}

// KVMWorks reports whether the lab's guests run under hardware KVM (else
// KubeVirt emulates them): kvmWorks.
func KVMWorks() bool { return kvmWorks() }

// kvmWorks reports whether this machine has hardware KVM: /dev/kvm opens
// and the CPU has virtualization extensions (vmx or svm). A /dev/kvm
// without them (a PVM host, as CI's) answers KVM's API but boots no stock
// guest kernel, and QEMU's -cpu host aborts there: KubeVirt must emulate.
// IPKEEPER_LAB_EMULATION=1 emulates anyway.
func kvmWorks() bool {
	if os.Getenv("IPKEEPER_LAB_EMULATION") == "1" {
		return false
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				if f == "vmx" || f == "svm" {
					return true
				}
			}
			return false
		}
	}
	return false
}

// InstallKubeVirtNode imports KubeVirt's launcher and handler image into
// every node and applies what virt-operator would install for
// virt-handler, rendered by virt-operator's own code (hack/tools.sh
// kubevirt-node's node-manifests): its DaemonSet, RBAC, certificates and
// CA bundle; then waits until virt-handler runs on every node.
func (cp *ControlPlane) InstallKubeVirtNode(ctx context.Context, t testing.TB, nodes []*RealNode) {
	t.Helper()
	dir := t.TempDir()
	archive, guest, cloudInitGuest := filepath.Join(dir, "kubevirt.tar"), filepath.Join(dir, "guest.tar"), filepath.Join(dir, "guest-cloud-init.tar")
	// The archives are written, then imported into the nodes, side by side.
	var g errgroup.Group
	g.Go(func() error { return writeKubeVirtImage(cp.Tools, archive) })
	g.Go(func() error { return writeGuestImage(cp.Tools, guest) })
	g.Go(func() error { return writeCloudInitGuestImage(cp.Tools, cloudInitGuest) })
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		g.Go(func() error { return n.ImportImages(ctx, archive, guest, cloudInitGuest) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	args := []string{KubeVirtNamespace, KubeVirtImageRegistry, KubeVirtImageTag}
	if !kvmWorks() {
		args = append(args, "emulation")
	}
	manifests, err := exec.CommandContext(ctx, filepath.Join(cp.Tools.KubeVirtNodeDir, "node-manifests"), args...).Output()
	if err != nil {
		t.Fatalf("rendering virt-handler's objects: %v", err)
	}
	if out, err := cp.Kubectl(ctx, manifests, "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		t.Fatalf("applying virt-handler's objects: %v\n%s", err, out)
	}
	cp.waitDaemonSet(ctx, t, KubeVirtNamespace, "virt-handler", len(nodes))
}
