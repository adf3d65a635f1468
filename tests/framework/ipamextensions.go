// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeVirt's ipam-extensions ("kubevirt-ipam-controller", which the
// network addons operator and OpenShift Virtualization deploy), run as
// shipped against this control plane: the manager binary hack/tools.sh
// builds from its source, with the ClusterRole and the
// MutatingWebhookConfiguration of its install.yaml. The test stands in for
// the Deployment and for cert-manager: it runs the process as the
// ServiceAccount's user (with only that ClusterRole) and gives the webhook a
// certificate for 127.0.0.1 and its CA. Its webhook listens on its fixed
// port 9443 and its metrics on :8080 (it has no flags for them), so one runs
// per machine at a time.
const (
	// IPAMExtensionsNamespace and IPAMExtensionsServiceAccount are where
	// its install.yaml runs it.
	IPAMExtensionsNamespace      = "kubevirt-ipam-controller-system"
	IPAMExtensionsServiceAccount = "kubevirt-ipam-controller-manager"
	ipamExtensionsWebhookPort    = 9443
)

// IPAMExtensions is a running ipam-extensions manager.
type IPAMExtensions struct {
	cp      *ControlPlane
	cmd     *exec.Cmd
	done    chan error
	objects []client.Object
	// Log is its log file.
	Log string
	// WebhookConfig is the name of its MutatingWebhookConfiguration.
	WebhookConfig string
}

// StartIPAMExtensions installs and starts ipam-extensions; it returns once
// its webhook answers. namespaces, when given, limits its webhook to those
// namespaces (its controllers still see the whole cluster).
func (cp *ControlPlane) StartIPAMExtensions(ctx context.Context, namespaces ...string) (*IPAMExtensions, error) {
	if err := requireExecutables(cp.Tools.IPAMExtensions); err != nil {
		return nil, err
	}
	install, err := os.ReadFile(filepath.Join(filepath.Dir(cp.Tools.IPAMExtensions), "install.yaml"))
	if err != nil {
		return nil, fmt.Errorf("ipam-extensions' install.yaml (run `make tools`): %w", err)
	}
	role, hook, err := ipamExtensionsObjects(install)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cp.Dir, "ipam-extensions-")
	if err != nil {
		return nil, err
	}
	if err := WriteTestPKI(dir); err != nil {
		return nil, err
	}
	caBundle, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	x := &IPAMExtensions{cp: cp, done: make(chan error, 1), WebhookConfig: hook.Name}

	user, groups := ServiceAccountUser(IPAMExtensionsNamespace, IPAMExtensionsServiceAccount)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate-v1-pod", ipamExtensionsWebhookPort)
	for i := range hook.Webhooks {
		hook.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
		if len(namespaces) > 0 {
			hook.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces},
			}}
		}
	}
	for _, o := range []client.Object{role, binding} {
		if err := cp.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating ipam-extensions' %T %s: %w", o, o.GetName(), err)
		}
		x.objects = append(x.objects, o)
	}
	sa, err := cp.env.AddUser(envtest.User{Name: user, Groups: groups}, cp.Config)
	if err != nil {
		return nil, fmt.Errorf("provisioning ipam-extensions' user: %w", err)
	}
	kubeconfig, err := sa.KubeConfig()
	if err != nil {
		return nil, err
	}
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := cp.newLog(filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	x.Log = log.path
	x.cmd = exec.Command(cp.Tools.IPAMExtensions,
		"--certificates-dir", dir,
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", probePort),
		"--leader-elect=false",
	)
	x.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigPath, "LOG_LEVEL=1")
	x.cmd.Stdout, x.cmd.Stderr = log, log
	x.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := x.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting ipam-extensions: %w", err)
	}
	go func() { x.done <- x.cmd.Wait() }()

	if err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case err := <-x.done:
			x.done <- err
			return false, fmt.Errorf("ipam-extensions exited during startup: %w (log: %s)", err, x.Log)
		default:
		}
		if ok, _ := httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)); !ok {
			return false, nil
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ipamExtensionsWebhookPort), time.Second)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	}); err != nil {
		x.Stop()
		return nil, fmt.Errorf("ipam-extensions not ready: %w (log: %s)", err, x.Log)
	}
	if err := createOrReplace(ctx, cp.Client, hook); err != nil {
		x.Stop()
		return nil, fmt.Errorf("registering ipam-extensions' webhook: %w", err)
	}
	x.objects = append(x.objects, hook)
	return x, nil
}

// createOrReplace creates the webhook configuration, or replaces one an
// interrupted uninstall left.
func createOrReplace(ctx context.Context, c client.Client, hook *admissionregistrationv1.MutatingWebhookConfiguration) error {
	err := c.Create(ctx, hook)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	var old admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKeyFromObject(hook), &old); err != nil {
		return err
	}
	hook.ResourceVersion = old.ResourceVersion
	return c.Update(ctx, hook)
}

// ipamExtensionsObjects reads, from ipam-extensions' install.yaml, the
// manager's ClusterRole and the MutatingWebhookConfiguration.
func ipamExtensionsObjects(install []byte) (*rbacv1.ClusterRole, *admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var role *rbacv1.ClusterRole
	var hook *admissionregistrationv1.MutatingWebhookConfiguration
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(install), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, fmt.Errorf("reading ipam-extensions' install.yaml: %w", err)
		}
		switch {
		case u.GetKind() == "ClusterRole" && u.GetName() == "kubevirt-ipam-controller-manager-role":
			role = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role); err != nil {
				return nil, nil, err
			}
		case u.GetKind() == "MutatingWebhookConfiguration":
			hook = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, hook); err != nil {
				return nil, nil, err
			}
		}
	}
	if role == nil || hook == nil {
		return nil, nil, errors.New("ipam-extensions' install.yaml has no manager ClusterRole or no MutatingWebhookConfiguration")
	}
	return role, hook, nil
}

// Stop stops the manager process (its objects stay, as after a crash).
func (x *IPAMExtensions) Stop() {
	if x.cmd == nil || x.cmd.Process == nil {
		return
	}
	select {
	case err := <-x.done:
		x.done <- err
		return
	default:
	}
	_ = x.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-x.done:
		x.done <- err
	case <-time.After(10 * time.Second):
		_ = x.cmd.Process.Kill()
	}
}

// Uninstall stops it and deletes its webhook configuration and RBAC, as
// removing it from the cluster does (its claims stay). It retries for up
// to a minute (an API server restarting meanwhile).
func (x *IPAMExtensions) Uninstall(ctx context.Context) error {
	x.Stop()
	for i := len(x.objects) - 1; i >= 0; i-- {
		o := x.objects[i]
		if err := Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			err := x.cp.Client.Delete(ctx, o)
			return err == nil || apierrors.IsNotFound(err), nil
		}); err != nil {
			return fmt.Errorf("deleting ipam-extensions' %s: %w", o.GetName(), err)
		}
		x.objects = x.objects[:i]
	}
	return nil
}
