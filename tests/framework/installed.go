// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// Running an installation: what `kubectl apply -f install.yaml` or `helm
// install` put into a namespace is run here as processes, with the
// commands the installed objects state. No kubelet runs on this machine,
// so RunInstalled plays it for one node: it reads the installed Deployment
// of ipkeeper-controller and DaemonSet of ipkeeper-agent, takes their
// containers' command, args and env as installed, and runs them with the
// binaries of the checkout (or of a pulled image), rewriting only what a
// process on this machine needs instead of a pod:
//
//   - credentials: --kubeconfig with a token of the workload's
//     ServiceAccount (the agent's bound to a pod on its node, so that it
//     carries the node name, as a kubelet-mounted token does);
//   - env: the downward API (namespace, pod and node name, service
//     account, IPs), resource limits, ConfigMap and Secret keys, read from
//     the cluster; $(VAR) references in args expanded as the kubelet does;
//   - the agent's --node-name, --socket and --cni-bin-dir (into a temporary
//     directory; --cni-plugin-source to the checkout's shim);
//   - every bind address (metrics, probes, the webhook) onto a free
//     loopback port, set even where the manifests leave the default, which
//     would bind on every interface;
//   - the webhook's certificates: self-managed ones get 127.0.0.1 as an
//     extra SAN; provided ones (cert-manager) come from WriteTestPKI, in a
//     temporary --webhook-cert-dir, its CA injected as cert-manager would;
//     the webhook configuration's Service reference is pointed at the
//     process (a URL), since no Service routes here.
//
// Everything else passes through unchanged: a flag the installed objects
// set that the binary does not know stops the process, and the test
// fails. Flags that are rewritten must be written --name=value.

// Names of the installed binaries, as the manifests' commands name them
// (hack/image puts them in /usr/bin).
const (
	installedControllerBinary = "ipkeeper-controller"
	installedAgentBinary      = "ipkeeper-agent"
	// installedEntrypoint runs when a container states no command.
	installedEntrypoint = installedControllerBinary
	// exitedLogLines bounds the log shown of a process that exited at
	// start: enough for its error and its usage.
	exitedLogLines = 300
	// installedPathEnv is the image's PATH (hack/image).
	installedPathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// InstalledOptions say which installation RunInstalled runs.
type InstalledOptions struct {
	// Namespace is where ipkeeper was installed (ipkeeper-system for the
	// rendered manifests). Required.
	Namespace string
	// Binaries run the installed commands. Required.
	Binaries *Binaries
	// Node is the node the agent stands for; default "installed-node".
	Node string
	// Controller and Agent name the Deployment and the DaemonSet. By
	// default, the one Deployment (DaemonSet) of Namespace whose container
	// runs ipkeeper-controller (ipkeeper-agent), whatever a Helm release
	// prefixed to its name.
	Controller, Agent string
	// ReadyTimeout bounds each process's start; default two minutes.
	ReadyTimeout time.Duration
}

// Installed is an installation run as processes: one controller replica
// and the agent of one node, stopped when the test ends (an agent that
// does not exit cleanly on SIGTERM fails the test).
type Installed struct {
	Controller *ControllerProcess
	Agent      *AgentProcess
	// ControllerArgs and AgentArgs are the command lines run, after the
	// rewrites.
	ControllerArgs, AgentArgs []string
	// WebhookConfiguration is the MutatingWebhookConfiguration the
	// controller serves, pointed at it.
	WebhookConfiguration string

	client *cniproto.Client
}

// RunInstalled starts the installed ipkeeper-controller and the
// ipkeeper-agent of one node as processes (see the comment above for what
// it rewrites and why) and waits until both are ready.
func (cp *ControlPlane) RunInstalled(t testing.TB, o InstalledOptions) *Installed {
	t.Helper()
	if o.Namespace == "" || o.Binaries == nil {
		t.Fatal("RunInstalled: Namespace and Binaries are required")
	}
	if o.Node == "" {
		o.Node = "installed-node"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	ctx := context.Background()
	// Short: the agent's socket path must fit a sockaddr_un.
	dir, err := os.MkdirTemp("", "ipk-installed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	var deploy appsv1.Deployment
	if err := cp.installedWorkload(ctx, o.Namespace, o.Controller, installedControllerBinary, &deploy); err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := cp.installedWorkload(ctx, o.Namespace, o.Agent, installedAgentBinary, &ds); err != nil {
		t.Fatal(err)
	}
	in := &Installed{}
	in.startController(t, cp, o, filepath.Join(dir, "controller"), &deploy)
	in.startAgent(t, cp, o, filepath.Join(dir, "agent"), &ds)
	return in
}

// Add sends a CNI ADD through the agent's socket for pod's interface
// ifName on nad, as Multus delegating to the NAD's plugin, which
// delegates to ipkeeper, would: the config is the NAD's (of a conflist,
// the plugin whose ipam is ipkeeper). No network namespace is made: the
// agent only allocates.
func (in *Installed) Add(ctx context.Context, pod *corev1.Pod, ifName string, nad *nadv1.NetworkAttachmentDefinition) (*types100.Result, error) {
	conf, err := NADNetConf(nad)
	if err != nil {
		return nil, err
	}
	resp, err := in.client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: SandboxID(pod), Netns: "/var/run/netns/" + pod.Name,
		IfName: ifName, Args: PodArgs(pod), Config: conf,
	})
	if err != nil {
		return nil, fmt.Errorf("ADD of %s/%s %s on %s/%s: %w", pod.Namespace, pod.Name, ifName, nad.Namespace, nad.Name, err)
	}
	res := &types100.Result{}
	if err := json.Unmarshal(resp.Result, res); err != nil {
		return nil, fmt.Errorf("decoding the ADD result %s: %w", resp.Result, err)
	}
	return res, nil
}

// Del sends the CNI DEL matching Add.
func (in *Installed) Del(ctx context.Context, pod *corev1.Pod, ifName string, nad *nadv1.NetworkAttachmentDefinition) error {
	conf, err := NADNetConf(nad)
	if err != nil {
		return err
	}
	if _, err := in.client.Do(ctx, cniproto.Request{
		Command: cniproto.CmdDel, ContainerID: SandboxID(pod), IfName: ifName, Args: PodArgs(pod), Config: conf,
	}); err != nil {
		return fmt.Errorf("DEL of %s/%s %s on %s/%s: %w", pod.Namespace, pod.Name, ifName, nad.Namespace, nad.Name, err)
	}
	return nil
}

// NADNetConf is the network config the ipkeeper plugin gets for nad: its
// config, or, of a conflist, the plugin whose ipam type is ipkeeper with
// the list's name and cniVersion.
func NADNetConf(nad *nadv1.NetworkAttachmentDefinition) (json.RawMessage, error) {
	var conf struct {
		CNIVersion string                       `json:"cniVersion"`
		Name       string                       `json:"name"`
		Plugins    []map[string]json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		return nil, fmt.Errorf("NAD %s/%s: config: %w", nad.Namespace, nad.Name, err)
	}
	if conf.Plugins == nil {
		return json.RawMessage(nad.Spec.Config), nil
	}
	for _, p := range conf.Plugins {
		var ipam struct {
			Type string `json:"type"`
		}
		if raw, ok := p["ipam"]; !ok || json.Unmarshal(raw, &ipam) != nil || ipam.Type != "ipkeeper" {
			continue
		}
		p["name"], _ = json.Marshal(conf.Name)
		p["cniVersion"], _ = json.Marshal(conf.CNIVersion)
		return json.Marshal(p)
	}
	return nil, fmt.Errorf("NAD %s/%s: no plugin of its conflist has ipam type ipkeeper", nad.Namespace, nad.Name)
}

// installedWorkload reads the Deployment or DaemonSet obj of namespace ns
// named name, or, when name is empty, the one whose container runs binary.
func (cp *ControlPlane) installedWorkload(ctx context.Context, ns, name, binary string, obj client.Object) error {
	kind := "Deployment"
	if _, ok := obj.(*appsv1.DaemonSet); ok {
		kind = "DaemonSet"
	}
	if name != "" {
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return fmt.Errorf("reading the installed %s %s/%s: %w", kind, ns, name, err)
		}
		return nil
	}
	var found []string
	switch o := obj.(type) {
	case *appsv1.Deployment:
		var list appsv1.DeploymentList
		if err := cp.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing the Deployments of %s: %w", ns, err)
		}
		for i := range list.Items {
			if _, err := installedContainer(&list.Items[i].Spec.Template.Spec, binary); err == nil {
				found, *o = append(found, list.Items[i].Name), list.Items[i]
			}
		}
	case *appsv1.DaemonSet:
		var list appsv1.DaemonSetList
		if err := cp.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing the DaemonSets of %s: %w", ns, err)
		}
		for i := range list.Items {
			if _, err := installedContainer(&list.Items[i].Spec.Template.Spec, binary); err == nil {
				found, *o = append(found, list.Items[i].Name), list.Items[i]
			}
		}
	}
	if len(found) != 1 {
		return fmt.Errorf("want one %s in %s whose container runs %s, found %d %v", kind, ns, binary, len(found), found)
	}
	return nil
}

// installedContainer is the one container of spec that runs binary.
func installedContainer(spec *corev1.PodSpec, binary string) (*corev1.Container, error) {
	var found *corev1.Container
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if installedBinaryOf(c) != binary {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("containers %s and %s both run %s", found.Name, c.Name, binary)
		}
		found = c
	}
	if found == nil {
		return nil, fmt.Errorf("no container runs %s", binary)
	}
	return found, nil
}

func installedBinaryOf(c *corev1.Container) string {
	if len(c.Command) == 0 {
		return installedEntrypoint
	}
	return path.Base(c.Command[0])
}

// installedArgs is what follows the binary on the container's command line.
func installedArgs(c *corev1.Container) []string {
	var args []string
	if len(c.Command) > 1 {
		args = append(args, c.Command[1:]...)
	}
	return append(args, c.Args...)
}

func (in *Installed) startController(t testing.TB, cp *ControlPlane, o InstalledOptions, dir string, d *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	spec := &d.Spec.Template.Spec
	c, err := installedContainer(spec, installedControllerBinary)
	if err != nil {
		t.Fatalf("Deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	podName := d.Name + "-installed"
	env, err := cp.installedEnv(ctx, d.Namespace, podName, o.Node, spec, c)
	if err != nil {
		t.Fatalf("Deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cp.ServiceAccountConfig(t, d.Namespace, serviceAccountOf(spec), "")); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	webhookPort := ports[0]
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	probes := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))

	args := expandEnvRefs(installedArgs(c), env)
	flags := newArgRewriter(args)
	mode := flags.value("webhook-cert-mode", "self-managed")
	var caBundle []byte
	switch mode {
	case "self-managed":
		sans := "127.0.0.1"
		if v := flags.value("webhook-extra-sans", ""); v != "" {
			sans = v + ",127.0.0.1"
		}
		flags.set("webhook-extra-sans", sans)
	case "provided":
		// What cert-manager would have mounted at the installed
		// --webhook-cert-dir, and its CA injector put into the caBundle.
		certDir := filepath.Join(dir, "certs")
		if err := os.MkdirAll(certDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := WriteTestPKI(certDir); err != nil {
			t.Fatal(err)
		}
		if caBundle, err = os.ReadFile(filepath.Join(certDir, "ca.crt")); err != nil {
			t.Fatal(err)
		}
		flags.set("webhook-cert-dir", certDir)
	default:
		t.Fatalf("Deployment %s/%s: --webhook-cert-mode=%s: RunInstalled knows self-managed and provided", d.Namespace, d.Name, mode)
	}
	flags.set("kubeconfig", kubeconfig)
	flags.set("webhook-host", "127.0.0.1")
	flags.set("webhook-port", strconv.Itoa(webhookPort))
	flags.setUnlessDisabled("metrics-bind-address", metrics, "0")
	flags.set("health-probe-bind-address", probes)
	if flags.err != nil {
		t.Fatalf("Deployment %s/%s: %v", d.Namespace, d.Name, flags.err)
	}
	in.WebhookConfiguration = flags.value("webhook-configuration-name", "ipkeeper")
	if err := cp.routeInstalledWebhook(ctx, in.WebhookConfiguration, webhookPort, caBundle); err != nil {
		t.Fatal(err)
	}

	in.ControllerArgs = flags.args
	proc, err := StartControllerProcess(ControllerProcessOptions{
		Binary: o.Binaries.Controller, Dir: dir, Args: flags.args, Env: env,
		WebhookPort: webhookPort, MetricsAddr: metrics, ProbeAddr: probes,
	})
	if err != nil {
		t.Fatal(err)
	}
	in.Controller = proc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last 80 lines of the installed ipkeeper-controller's log (%s)\n%s", proc.LogPath, proc.Tail(80))
		}
		proc.Stop()
	})
	if err := proc.WaitReady(ctx, o.ReadyTimeout); err != nil {
		// A process that exited at start printed why first (then, for an
		// unknown flag, its usage): the whole log.
		tail := 60
		if proc.Exited() {
			tail = exitedLogLines
		}
		t.Fatalf("the installed ipkeeper-controller (%s) did not get ready: %v\nlog:\n%s", strings.Join(flags.args, " "), err, proc.Tail(tail))
	}
}

func (in *Installed) startAgent(t testing.TB, cp *ControlPlane, o InstalledOptions, dir string, ds *appsv1.DaemonSet) {
	t.Helper()
	ctx := context.Background()
	spec := &ds.Spec.Template.Spec
	c, err := installedContainer(spec, installedAgentBinary)
	if err != nil {
		t.Fatalf("DaemonSet %s/%s: %v", ds.Namespace, ds.Name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	env, err := cp.installedEnv(ctx, ds.Namespace, ds.Name+"-"+o.Node, o.Node, spec, c)
	if err != nil {
		t.Fatalf("DaemonSet %s/%s: %v", ds.Namespace, ds.Name, err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cp.ServiceAccountConfig(t, ds.Namespace, serviceAccountOf(spec), o.Node)); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	health := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))

	flags := newArgRewriter(expandEnvRefs(installedArgs(c), env))
	flags.set("kubeconfig", kubeconfig)
	flags.set("node-name", o.Node)
	flags.set("socket", AgentSocketPath(dir))
	flags.set("cni-bin-dir", AgentCNIBinDir(dir))
	if flags.has("cni-plugin-source") {
		flags.set("cni-plugin-source", o.Binaries.Shim)
	}
	flags.setUnlessDisabled("metrics-bind-address", metrics, "")
	flags.set("health-probe-bind-address", health)
	if flags.err != nil {
		t.Fatalf("DaemonSet %s/%s: %v", ds.Namespace, ds.Name, flags.err)
	}
	in.AgentArgs = flags.args
	proc, err := StartAgentProcess(AgentProcessOptions{
		Binary: o.Binaries.Agent, NodeName: o.Node, Dir: dir, Args: flags.args, Env: env,
		HealthAddr: health, MetricsAddr: metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	in.Agent = proc
	in.client = &cniproto.Client{SocketPath: proc.Socket, Timeout: time.Minute}
	ready := false
	t.Cleanup(func() {
		// An agent that never got ready has failed the test already.
		if err := proc.Stop(); err != nil && ready {
			t.Errorf("stopping the installed ipkeeper-agent: %v\n%s", err, proc.Tail(40))
		}
	})
	proc.DumpLogOnFailure(t)
	if err := proc.WaitReady(ctx, o.ReadyTimeout); err != nil {
		msg := ""
		if exited, _ := proc.Exited(); exited {
			msg = "\nlog:\n" + proc.Tail(exitedLogLines)
		}
		t.Fatalf("the installed ipkeeper-agent (%s) did not get ready: %v%s", strings.Join(flags.args, " "), err, msg)
	}
	ready = true
}

func serviceAccountOf(spec *corev1.PodSpec) string {
	if spec.ServiceAccountName != "" {
		return spec.ServiceAccountName
	}
	return "default"
}

// routeInstalledWebhook points every webhook of configuration name that
// calls a Service at https://127.0.0.1:port on the Service's path, and
// sets caBundle when given (provided certificates: what cert-manager's CA
// injector does); self-managed certificates get theirs from the controller.
func (cp *ControlPlane) routeInstalledWebhook(ctx context.Context, name string, port int, caBundle []byte) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var whc admissionregistrationv1.MutatingWebhookConfiguration
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &whc); err != nil {
			return err
		}
		for i := range whc.Webhooks {
			cc := &whc.Webhooks[i].ClientConfig
			if cc.Service != nil {
				cc.URL = ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, ptr.Deref(cc.Service.Path, "/")))
				cc.Service = nil
			}
			if caBundle != nil {
				cc.CABundle = caBundle
			}
		}
		return cp.Client.Update(ctx, &whc)
	})
	if err != nil {
		return fmt.Errorf("pointing the installed webhook configuration %s at the controller process: %w", name, err)
	}
	return nil
}

// installedEnv is the environment a kubelet would give container c of a
// pod of spec named podName on node in namespace ns: the image's PATH,
// then envFrom and env, in order.
func (cp *ControlPlane) installedEnv(ctx context.Context, ns, podName, node string, spec *corev1.PodSpec, c *corev1.Container) ([]string, error) {
	vals := map[string]string{}
	var order []string
	put := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	k, v, _ := strings.Cut(installedPathEnv, "=")
	put(k, v)
	for _, from := range c.EnvFrom {
		data, err := cp.installedSource(ctx, ns, from.ConfigMapRef, from.SecretRef)
		if err != nil {
			return nil, fmt.Errorf("container %s: envFrom: %w", c.Name, err)
		}
		for k, v := range data {
			put(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			put(e.Name, expandEnvRef(e.Value, vals))
			continue
		}
		v, err := cp.installedEnvValue(ctx, ns, podName, node, spec, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("container %s: env %s: %w", c.Name, e.Name, err)
		}
		put(e.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, nil
}

func (cp *ControlPlane) installedEnvValue(ctx context.Context, ns, podName, node string, spec *corev1.PodSpec, c *corev1.Container, src *corev1.EnvVarSource) (string, error) {
	switch {
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "metadata.namespace":
			return ns, nil
		case "metadata.name":
			return podName, nil
		case "spec.nodeName":
			return node, nil
		case "spec.serviceAccountName":
			return serviceAccountOf(spec), nil
		case "status.podIP", "status.hostIP":
			return "127.0.0.1", nil
		}
		return "", fmt.Errorf("fieldRef %s: RunInstalled does not know it", src.FieldRef.FieldPath)
	case src.ResourceFieldRef != nil:
		return resourceFieldValue(c, src.ResourceFieldRef)
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		data, err := cp.installedSource(ctx, ns, &corev1.ConfigMapEnvSource{LocalObjectReference: ref.LocalObjectReference, Optional: ref.Optional}, nil)
		if err != nil {
			return "", err
		}
		v, ok := data[ref.Key]
		if !ok && !ptr.Deref(ref.Optional, false) {
			return "", fmt.Errorf("ConfigMap %s has no key %s", ref.Name, ref.Key)
		}
		return v, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		data, err := cp.installedSource(ctx, ns, nil, &corev1.SecretEnvSource{LocalObjectReference: ref.LocalObjectReference, Optional: ref.Optional})
		if err != nil {
			return "", err
		}
		v, ok := data[ref.Key]
		if !ok && !ptr.Deref(ref.Optional, false) {
			return "", fmt.Errorf("secret %s has no key %s", ref.Name, ref.Key)
		}
		return v, nil
	}
	return "", errors.New("valueFrom of a kind RunInstalled does not know")
}

// installedSource reads the data of a ConfigMap or a Secret of ns; an
// optional one that is missing is empty.
func (cp *ControlPlane) installedSource(ctx context.Context, ns string, cm *corev1.ConfigMapEnvSource, secret *corev1.SecretEnvSource) (map[string]string, error) {
	switch {
	case cm != nil:
		got, err := cp.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(cm.Optional, false) && client.IgnoreNotFound(err) == nil {
				return nil, nil
			}
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, cm.Name, err)
		}
		return got.Data, nil
	case secret != nil:
		got, err := cp.Clientset.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(secret.Optional, false) && client.IgnoreNotFound(err) == nil {
				return nil, nil
			}
			return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, secret.Name, err)
		}
		data := map[string]string{}
		for k, v := range got.Data {
			data[k] = string(v)
		}
		return data, nil
	}
	return nil, errors.New("envFrom names neither a ConfigMap nor a Secret")
}

// resourceFieldValue is the downward API's value of a container resource:
// the quantity divided by the divisor, rounded up. A limit the container
// does not set would be the node's allocatable, which this machine has
// not: that is an error.
func resourceFieldValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, res, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s: want limits.<name> or requests.<name>", ref.Resource)
	}
	var list corev1.ResourceList
	switch kind {
	case "limits":
		list = c.Resources.Limits
	case "requests":
		list = c.Resources.Requests
	default:
		return "", fmt.Errorf("resourceFieldRef %s: want limits.<name> or requests.<name>", ref.Resource)
	}
	q, ok := list[corev1.ResourceName(res)]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s: the container sets none (a kubelet would use the node's allocatable)", ref.Resource)
	}
	divisor := resource.MustParse("1")
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor
	}
	// ceil(q / divisor), in milli-units so that CPU fractions count.
	n, d := q.MilliValue(), divisor.MilliValue()
	return strconv.FormatInt((n+d-1)/d, 10), nil
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expandEnvRef expands $(NAME) of the variables defined so far, as the
// kubelet does in env values, commands and args; an undefined reference
// stays as it is.
func expandEnvRef(s string, vals map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vals[envRef.FindStringSubmatch(m)[1]]; ok {
			return v
		}
		return m
	})
}

func expandEnvRefs(args, env []string) []string {
	vals := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vals[k] = v
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expandEnvRef(a, vals)
	}
	return out
}

// argRewriter replaces the values of --name=value flags on a command line,
// or appends them; the first error sticks.
type argRewriter struct {
	args []string
	err  error
}

func newArgRewriter(args []string) *argRewriter {
	return &argRewriter{args: slices.Clone(args)}
}

// find returns the index of flag name, -1 when absent. A flag the helper
// rewrites written as "--name value" is an error: its value would be
// taken for an argument.
func (r *argRewriter) find(name string) int {
	idx := -1
	for i, a := range r.args {
		flag, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || flag != name {
			continue
		}
		if !hasValue && r.err == nil {
			r.err = fmt.Errorf("argument %q: RunInstalled rewrites --%s and needs it written --%s=value", a, name, name)
		}
		idx = i
	}
	return idx
}

func (r *argRewriter) has(name string) bool { return r.find(name) >= 0 }

// value is the flag's value, or def when it is not set.
func (r *argRewriter) value(name, def string) string {
	i := r.find(name)
	if i < 0 {
		return def
	}
	_, v, _ := strings.Cut(r.args[i], "=")
	return v
}

// set gives the flag value: every occurrence replaced, or appended.
func (r *argRewriter) set(name, value string) {
	if r.find(name) < 0 {
		r.args = append(r.args, "--"+name+"="+value)
		return
	}
	for i, a := range r.args {
		flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && flag == name {
			r.args[i] = "--" + name + "=" + value
		}
	}
}

// setUnlessDisabled is set, but keeps the flag when the installed value
// turns the listener off (disabled).
func (r *argRewriter) setUnlessDisabled(name, value, disabled string) {
	if r.has(name) && r.value(name, "") == disabled {
		return
	}
	r.set(name, value)
}

func freePorts(n int) ([]int, error) {
	// Held open together, so that the n ports differ.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// WriteKubeconfig writes a kubeconfig file for cfg: its server, CA and
// bearer token or client certificate.
func WriteKubeconfig(file string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
		TLSServerName:            cfg.ServerName,
	}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		ClientCertificate:     cfg.CertFile,
		ClientCertificateData: cfg.CertData,
		ClientKey:             cfg.KeyFile,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts["context"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
	kc.CurrentContext = "context"
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", file, err)
	}
	return nil
}
