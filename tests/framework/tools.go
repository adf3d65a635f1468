// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tools holds the paths of the pinned binaries the framework runs.
type Tools struct {
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	Kubectl               string
	CNIPluginsDir         string
	Multus                string
	// VirtController is KubeVirt's virt-controller; KubeVirtCRDsDir holds
	// the CRDs generated from the same module.
	VirtController  string
	KubeVirtCRDsDir string
	// IPAMExtensions is KubeVirt's ipam-extensions manager; its
	// install.yaml is next to it.
	IPAMExtensions string
	// Helm is the pinned helm (the chart's tests).
	Helm string
	// Kubelet and KubeScheduler run the real-node lane's nodes and
	// scheduling; NodeImagesDir holds the contents of its base images
	// (pause, busybox); MultusThinEntrypoint is Multus' DaemonSet
	// entrypoint, next to its install_multus and its DaemonSet manifest.
	Kubelet, KubeScheduler, NodeImagesDir, MultusThinEntrypoint string
	// KubeVirtNodeDir holds KubeVirt's node programs, launcher files and
	// node-manifests; LauncherRootfs the launcher image's root filesystem.
	KubeVirtNodeDir, LauncherRootfs string
	// GuestKernelDir holds the guest's kernel and virtio modules;
	// GuestRootfs the cloud-init guest's root filesystem.
	GuestKernelDir, GuestRootfs string
}

// RepoRoot returns the root of the ipkeeper checkout (the directory holding go.mod).
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating go.mod: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the ipkeeper module (go env GOMOD is empty)")
	}
	return filepath.Dir(gomod), nil
}

// FindTools reads the binaries' paths from the environment (as exported by
// the Makefile) or, when unset, from `hack/tools.sh --env`, which computes
// the same pinned paths without building anything. Missing binaries are an
// error that says how to build them: integration tests must not silently skip.
func FindTools() (*Tools, error) {
	vars := map[string]string{}
	keys := []string{"IPKEEPER_ETCD", "IPKEEPER_KUBE_APISERVER", "IPKEEPER_KUBE_CONTROLLER_MANAGER",
		"IPKEEPER_KUBECTL", "IPKEEPER_CNI_PLUGINS_DIR", "IPKEEPER_MULTUS", "IPKEEPER_VIRT_CONTROLLER", "IPKEEPER_KUBEVIRT_CRDS_DIR", "IPKEEPER_IPAM_EXTENSIONS", "IPKEEPER_HELM",
		"IPKEEPER_KUBELET", "IPKEEPER_KUBE_SCHEDULER", "IPKEEPER_NODE_IMAGES_DIR", "IPKEEPER_MULTUS_THIN_ENTRYPOINT",
		"IPKEEPER_KUBEVIRT_NODE_DIR", "IPKEEPER_LAUNCHER_ROOTFS", "IPKEEPER_GUEST_KERNEL_DIR", "IPKEEPER_GUEST_ROOTFS"}
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			vars[k] = v
		}
	}
	if len(vars) < len(keys) {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		out, err := exec.Command("bash", filepath.Join(root, "hack", "tools.sh"), "--env").Output()
		if err != nil {
			return nil, fmt.Errorf("running hack/tools.sh --env: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				if _, set := vars[k]; !set {
					vars[k] = v
				}
			}
		}
	}
	t := &Tools{
		Etcd:                  vars["IPKEEPER_ETCD"],
		KubeAPIServer:         vars["IPKEEPER_KUBE_APISERVER"],
		KubeControllerManager: vars["IPKEEPER_KUBE_CONTROLLER_MANAGER"],
		Kubectl:               vars["IPKEEPER_KUBECTL"],
		CNIPluginsDir:         vars["IPKEEPER_CNI_PLUGINS_DIR"],
		Multus:                vars["IPKEEPER_MULTUS"],
		VirtController:        vars["IPKEEPER_VIRT_CONTROLLER"],
		KubeVirtCRDsDir:       vars["IPKEEPER_KUBEVIRT_CRDS_DIR"],
		IPAMExtensions:        vars["IPKEEPER_IPAM_EXTENSIONS"],
		Helm:                  vars["IPKEEPER_HELM"],
		Kubelet:               vars["IPKEEPER_KUBELET"],
		KubeScheduler:         vars["IPKEEPER_KUBE_SCHEDULER"],
		NodeImagesDir:         vars["IPKEEPER_NODE_IMAGES_DIR"],
		MultusThinEntrypoint:  vars["IPKEEPER_MULTUS_THIN_ENTRYPOINT"],
		KubeVirtNodeDir:       vars["IPKEEPER_KUBEVIRT_NODE_DIR"],
		LauncherRootfs:        vars["IPKEEPER_LAUNCHER_ROOTFS"],
		GuestKernelDir:        vars["IPKEEPER_GUEST_KERNEL_DIR"],
		GuestRootfs:           vars["IPKEEPER_GUEST_ROOTFS"],
	}
	return t, nil
}

// requireExecutables fails with a build hint when a binary is missing.
func requireExecutables(paths ...string) error {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("required binary %q is missing: run `make tools` (builds the pinned versions into the cache, once)", p)
		}
	}
	return nil
}
