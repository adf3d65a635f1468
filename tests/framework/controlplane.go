// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clonev1beta1 "kubevirt.io/api/clone/v1beta1"
	snapshotv1beta1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	ipkscheme "github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// Options tune the control plane.
type Options struct {
	// WithControllerManager starts kube-controller-manager (garbage collector
	// and namespace controllers). Default true; set Without to skip it.
	WithoutControllerManager bool
	// ExtraCRDDirs are installed in addition to the shipped and test CRDs.
	ExtraCRDDirs []string
	// SkipCRDs names files of manifests/crds not to install, for tests of
	// what happens before a CRD exists.
	SkipCRDs []string
	// WithoutKubeVirtCRDs leaves KubeVirt's CRDs out, as on a cluster
	// without KubeVirt; InstallKubeVirtCRDs adds them later.
	WithoutKubeVirtCRDs bool
	// WithoutClusterAPICRDs leaves Cluster API's IPAddressClaim, IPAddress
	// and Cluster CRDs out; InstallClusterAPICRDs adds them later.
	WithoutClusterAPICRDs bool
	// VirtController runs KubeVirt's own virt-controller (see
	// virtcontroller.go). The KubeVirt CRDs are always the ones generated
	// with it (hack/tools.sh), so CRDs and binary agree.
	VirtController bool
	// Lab runs the control plane as a cluster with real nodes does
	// (lab.go): kube-apiserver on LabAPIServerIP:443, the kubernetes
	// Service's ClusterIP, with Node and RBAC authorization, the
	// NodeRestriction and ServiceAccount admission plugins and webhooks
	// reached at their pods' addresses; kube-controller-manager with every
	// default controller (workloads, ServiceAccounts and their CA bundle,
	// node lifecycle); and the real kube-scheduler. Only in EnterLab's
	// network namespace.
	Lab bool
}

// ControlPlane is a running etcd + kube-apiserver (+ kube-controller-manager).
type ControlPlane struct {
	// Config authenticates as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client with ipkeeper's scheme (no cache: reads are live).
	Client client.Client
	// Clientset is a typed client-go clientset.
	Clientset kubernetes.Interface
	// Dynamic is a dynamic client, for KubeVirt objects and other unstructured data.
	Dynamic dynamic.Interface
	// Scheme has the built-ins, IPReservation, IPAMClaim and NAD types.
	Scheme *runtime.Scheme
	// KubeconfigPath is an admin kubeconfig for processes started by tests.
	KubeconfigPath string
	// virtControllerKubeconfig authenticates as KubeVirt's controller
	// ServiceAccount (KubeVirtControllerServiceAccount), in system:masters.
	virtControllerKubeconfig string
	// virtControllerWanted: StartVirtController was called (a restart
	// after a failed start tries again).
	virtControllerWanted bool
	// Tools are the binaries in use.
	Tools *Tools
	// Dir holds kubeconfigs and component logs; removed by Stop.
	Dir string

	env *envtest.Environment
	// noKubeVirt is true while KubeVirt's CRDs are not installed.
	noKubeVirt bool
	// kubeVirtCRDs is the directory of the KubeVirt CRDs in use.
	kubeVirtCRDs   string
	virtController *virtControllerProc
	logs           map[string]*logFile
	logsMu         *sync.Mutex
	kcm            *exec.Cmd
	done           chan error
	lab            bool
	scheduler      *exec.Cmd
}

// Start brings up the control plane and installs every CRD ipkeeper ships
// (manifests/crds) or tests with (tests/crds). It returns once the API server
// serves the CRDs and, if started, kube-controller-manager reports healthy.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	tools, err := FindTools()
	if err != nil {
		return nil, err
	}
	if err := requireExecutables(tools.Etcd, tools.KubeAPIServer); err != nil {
		return nil, err
	}
	if !opts.WithoutControllerManager {
		if err := requireExecutables(tools.KubeControllerManager); err != nil {
			return nil, err
		}
	}
	if opts.VirtController {
		if opts.WithoutKubeVirtCRDs {
			return nil, errors.New("VirtController needs the KubeVirt CRDs: it cannot be combined with WithoutKubeVirtCRDs")
		}
		if err := requireExecutables(tools.VirtController); err != nil {
			return nil, err
		}
	}
	if !opts.WithoutKubeVirtCRDs {
		if _, err := os.Stat(tools.KubeVirtCRDsDir); err != nil {
			return nil, fmt.Errorf("the generated KubeVirt CRDs are missing (%w): run `make tools`", err)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ipkeeper-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("creating control plane dir: %w", err)
	}
	cp := &ControlPlane{Tools: tools, Dir: dir, logs: map[string]*logFile{}, logsMu: &sync.Mutex{}, kubeVirtCRDs: tools.KubeVirtCRDsDir}
	defer func() {
		if err != nil {
			cp.DumpLogs(os.Stderr, 60)
			_ = cp.Stop()
		}
	}()
	if err := cp.setControllerLogger(); err != nil {
		return nil, err
	}

	etcdLog, err := cp.newLog("etcd")
	if err != nil {
		return nil, err
	}
	apiLog, err := cp.newLog("kube-apiserver")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "kube-apiserver"), 0o700); err != nil {
		return nil, fmt.Errorf("creating kube-apiserver cert dir: %w", err)
	}
	shipped, err := shippedCRDs(root, opts.SkipCRDs)
	if err != nil {
		return nil, err
	}
	crdDirs := append(shipped, filepath.Join(root, "tests", "crds", "cert-manager"))
	if !opts.WithoutKubeVirtCRDs {
		crdDirs = append(crdDirs, cp.kubeVirtCRDs)
	}
	if !opts.WithoutClusterAPICRDs {
		crdDirs = append(crdDirs, clusterAPICRDDir(root))
	}
	crdDirs = append(crdDirs, opts.ExtraCRDDirs...)
	cp.noKubeVirt = opts.WithoutKubeVirtCRDs
	cp.lab = opts.Lab
	if cp.lab && !InLab() {
		return nil, errors.New("Options.Lab needs the lab's network namespace: call framework.EnterLab in TestMain")
	}
	cp.env = &envtest.Environment{
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		ControlPlane: envtest.ControlPlane{
			// StopTimeout: a graceful stop with the real-node lane's
			// kubelets and watches still connected has taken longer than
			// envtest's 20 s default on two loaded cores.
			Etcd: &envtest.Etcd{Path: tools.Etcd, Out: etcdLog, Err: etcdLog, StartTimeout: time.Minute, StopTimeout: time.Minute},
			// A fixed CertDir keeps the serving certificate (and so the CA
			// clients trust) across RestartAPIServer.
			APIServer: &envtest.APIServer{Path: tools.KubeAPIServer, Out: apiLog, Err: apiLog, StartTimeout: 2 * time.Minute, StopTimeout: time.Minute,
				CertDir: filepath.Join(dir, "kube-apiserver")},
		},
	}
	if cp.lab {
		api := cp.env.ControlPlane.APIServer
		api.Address, api.Port = LabAPIServerIP, "443"
		api.Configure().
			Set("advertise-address", LabAPIServerIP).
			Set("service-cluster-ip-range", LabServiceCIDR).
			Set("authorization-mode", "Node,RBAC").
			Set("enable-admission-plugins", "NodeRestriction,ServiceAccount").
			Set("disable-admission-plugins", "").
			Set("enable-aggregator-routing", "true").
			Set("allow-privileged", "true").
			Set("kubelet-preferred-address-types", "InternalIP")
	}
	if cp.Config, err = cp.env.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	// Tests and benchmarks create many objects quickly: no client-side
	// throttling, so the API server's own limits are what is measured.
	cp.Config.QPS = -1

	admin, err := cp.env.AddUser(envtest.User{Name: "ipkeeper-test-admin", Groups: []string{"system:masters"}}, cp.Config)
	if err != nil {
		return nil, fmt.Errorf("provisioning the admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("rendering the admin kubeconfig: %w", err)
	}
	cp.KubeconfigPath = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(cp.KubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}
	// virt-controller acts as KubeVirt's controller ServiceAccount, the
	// user admission policies know it by (with every right, as here).
	kvUser, kvGroups := ServiceAccountUser(KubeVirtNamespace, KubeVirtControllerServiceAccount)
	kvAdmin, err := cp.env.AddUser(envtest.User{Name: kvUser, Groups: append(kvGroups, "system:masters")}, cp.Config)
	if err != nil {
		return nil, fmt.Errorf("provisioning virt-controller's user: %w", err)
	}
	if kubeconfig, err = kvAdmin.KubeConfig(); err != nil {
		return nil, fmt.Errorf("rendering virt-controller's kubeconfig: %w", err)
	}
	cp.virtControllerKubeconfig = filepath.Join(dir, "virt-controller.kubeconfig")
	if err := os.WriteFile(cp.virtControllerKubeconfig, kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}

	if cp.Scheme, err = ipkscheme.New(); err != nil {
		return nil, err
	}
	if err := capi.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	// KubeVirt's snapshot, restore and clone objects: tests write them as
	// a user does, for virt-controller's own controllers.
	if err := snapshotv1beta1.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	if err := clonev1beta1.AddToScheme(cp.Scheme); err != nil {
		return nil, err
	}
	if cp.Client, err = client.New(cp.Config, client.Options{Scheme: cp.Scheme}); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	if cp.Clientset, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	if cp.Dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}

	if !opts.WithoutControllerManager {
		if err := cp.startControllerManager(ctx); err != nil {
			return nil, err
		}
	}
	if cp.lab {
		if err := cp.startScheduler(); err != nil {
			return nil, err
		}
	}
	if opts.VirtController {
		if err := cp.StartVirtController(ctx); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// shippedCRDs lists manifests/crds: the directory itself, or its CRD files
// but the skipped ones.
func shippedCRDs(root string, skip []string) ([]string, error) {
	dir := filepath.Join(root, "manifests", "crds")
	if len(skip) == 0 {
		return []string{dir}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing CRDs: %w", err)
	}
	var paths []string
	found := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") || e.Name() == "kustomization.yaml" {
			continue
		}
		if slices.Contains(skip, e.Name()) {
			found++
			continue
		}
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	if found != len(skip) {
		return nil, fmt.Errorf("SkipCRDs %q: not all are files of %s", skip, dir)
	}
	return paths, nil
}

// startControllerManager runs kube-controller-manager with only the
// controllers tests rely on: owner-reference garbage collection and namespace
// deletion. It starts after the CRDs are installed so the garbage collector
// discovers them at once, and waits for /healthz on its secure port.
func (cp *ControlPlane) startControllerManager(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	log, err := cp.newLog("kube-controller-manager")
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--controllers=garbagecollector,namespace,clusterrole-aggregation",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "kcm-certs"),
		"-v=2",
	}
	if cp.lab {
		// Real nodes run real workloads: every default controller, and the
		// CA bundle (kube-root-ca.crt) each pod's projected token volume
		// reads.
		ca := filepath.Join(cp.Dir, "apiserver-ca.crt")
		if err := os.WriteFile(ca, cp.Config.CAData, 0o600); err != nil {
			return fmt.Errorf("writing the API server's CA: %w", err)
		}
		args[1] = "--controllers=*"
		args = append(args, "--root-ca-file="+ca, "--service-cluster-ip-range="+LabServiceCIDR)
	}
	cmd := exec.Command(cp.Tools.KubeControllerManager, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	cp.kcm = cmd
	cp.done = make(chan error, 1)
	go func() { cp.done <- cmd.Wait() }()

	httpc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// The controller manager serves a self-signed certificate; /healthz carries no secrets.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case err := <-cp.done:
			cp.done <- err
			return fmt.Errorf("kube-controller-manager exited during startup: %w (log: %s)", err, log.path)
		default:
		}
		if resp, err := httpc.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-controller-manager not healthy at %s after 90s (log: %s)", url, log.path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address with the same certificates, keeping etcd (and so every object)
// running. Clients reconnect by themselves; watches end and are re-made.
// A server that does not finish its graceful shutdown within stopTimeout
// is killed (SIGKILL), a crash rather than a clean stop; killed says so.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, stopTimeout time.Duration) (killed bool, err error) {
	api := cp.env.ControlPlane.APIServer
	api.StopTimeout = stopTimeout
	if err := api.Stop(); err != nil {
		if !strings.Contains(err.Error(), "timeout waiting for process") {
			return false, fmt.Errorf("stopping kube-apiserver: %w", err)
		}
		// envtest sent SIGKILL; wait until the port is free again.
		killed = true
		addr := net.JoinHostPort(api.Address, api.Port)
		if err := Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return true, nil
			}
			_ = conn.Close()
			return false, nil
		}); err != nil {
			return killed, fmt.Errorf("killed kube-apiserver still listens on %s: %w", addr, err)
		}
	}
	if err := api.Start(); err != nil {
		return killed, fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return killed, nil
}

// EtcdURL is etcd's client URL (plain HTTP on loopback; it also serves
// etcd's v3 JSON gateway).
func (cp *ControlPlane) EtcdURL() string { return cp.env.ControlPlane.Etcd.URL.String() }

// Stop stops kube-controller-manager, kube-apiserver and etcd and removes Dir.
func (cp *ControlPlane) Stop() error {
	var errs []error
	// virt-controller first: it would otherwise log every API error while
	// the API server goes away.
	cp.virtController.stop()
	if cp.scheduler != nil && cp.scheduler.Process != nil {
		_ = cp.scheduler.Process.Kill()
		_ = cp.scheduler.Wait()
	}
	if cp.kcm != nil && cp.kcm.Process != nil {
		_ = cp.kcm.Process.Signal(syscall.SIGTERM)
		select {
		case <-cp.done:
		case <-time.After(10 * time.Second):
			_ = cp.kcm.Process.Kill()
			<-cp.done
		}
	}
	if cp.env != nil {
		if err := cp.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
	}
	for _, l := range cp.logs {
		_ = l.close()
	}
	if cp.Dir != "" {
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DumpLogs writes the last tailLines lines of every component's log to w.
func (cp *ControlPlane) DumpLogs(w io.Writer, tailLines int) {
	names := []string{"etcd", "kube-apiserver", "kube-controller-manager"}
	cp.logsMu.Lock()
	for name := range cp.logs {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	cp.logsMu.Unlock()
	for _, name := range names {
		l, ok := cp.logs[name]
		if !ok {
			continue
		}
		data, err := os.ReadFile(l.path)
		if err != nil {
			fmt.Fprintf(w, "--- %s log unreadable: %v\n", name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > tailLines {
			lines = lines[len(lines)-tailLines:]
		}
		fmt.Fprintf(w, "--- last %d lines of %s (%s)\n%s\n", len(lines), name, l.path, strings.Join(lines, "\n"))
	}
}

// TB is the part of testing.TB the framework uses.
type TB interface {
	Cleanup(func())
	Failed() bool
	Logf(format string, args ...any)
}

// DumpLogsOnFailure prints the component logs when t fails.
func (cp *ControlPlane) DumpLogsOnFailure(t TB) {
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			cp.DumpLogs(&b, 40)
			t.Logf("control plane logs:\n%s", b.String())
		}
	})
}

type logFile struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// ComponentLog returns a log file for a component a test runs in-process
// (for example ipkeeper-controller); DumpLogs includes it.
func (cp *ControlPlane) ComponentLog(name string) (io.Writer, error) {
	cp.logsMu.Lock()
	defer cp.logsMu.Unlock()
	if l, ok := cp.logs[name]; ok {
		return l, nil
	}
	return cp.newLog(name)
}

func (cp *ControlPlane) newLog(name string) (*logFile, error) {
	path := filepath.Join(cp.Dir, name+".log")
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating %s log: %w", name, err)
	}
	l := &logFile{f: f, path: path}
	cp.logs[name] = l
	return l, nil
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (l *logFile) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// As returns a view of the control plane whose Config authenticates as
// user (impersonation, with groups), for running a component with only its
// own RBAC. Client and Clientset stay the admin's.
func (cp *ControlPlane) As(user string, groups ...string) *ControlPlane {
	view := *cp
	view.Config = rest.CopyConfig(cp.Config)
	view.Config.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return &view
}

// ServiceAccountUser is the user name and groups of a ServiceAccount.
func ServiceAccountUser(namespace, name string) (string, []string) {
	return "system:serviceaccount:" + namespace + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// Kubectl runs the pinned kubectl against this control plane as admin.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, cp.Tools.Kubectl, append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}
