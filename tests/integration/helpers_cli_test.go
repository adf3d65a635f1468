// SPDX-License-Identifier: Apache-2.0

package integration

// Helpers of the kubectl-ipkeeper tests: the commands run in-process
// (cli.Main, what the binary's main calls) against the test control plane
// through its admin kubeconfig, so flag parsing, kubeconfig loading and
// exit codes are the real ones.

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// cliResult is what one run of the plugin printed and returned.
type cliResult struct {
	out, err string
	code     int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.out, r.err)
}

// runCLI runs `kubectl ipkeeper args...` against the test control plane.
// IPKEEPER_CLI_OUTPUT=1 logs the output, for docs/cli.md.
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := cli.Main(ctx, append(args, "--kubeconfig", cp.KubeconfigPath), cli.Streams{Out: &out, Err: &errOut})
	r := cliResult{out: out.String(), err: errOut.String(), code: code}
	if os.Getenv("IPKEEPER_CLI_OUTPUT") != "" {
		t.Logf("$ kubectl ipkeeper %s\n%s%s(exit %d)", strings.Join(args, " "), r.out, r.err, r.code)
	}
	return r
}

// cliCase is one table row: args, the exit code, and strings that must
// (and must not) appear on stdout and stderr.
type cliCase struct {
	name       string
	args       []string
	code       int
	stdout     []string
	stderr     []string
	notStdout  []string
	checkExtra func(t *testing.T, r cliResult)
}

func runCLICases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit code %d, want %d", r.code, tc.code)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(r.out, s) {
					t.Errorf("stdout lacks %q", s)
				}
			}
			for _, s := range tc.notStdout {
				if strings.Contains(r.out, s) {
					t.Errorf("stdout has %q", s)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.err, s) {
					t.Errorf("stderr lacks %q", s)
				}
			}
			if tc.checkExtra != nil {
				tc.checkExtra(t, r)
			}
			if t.Failed() {
				t.Logf("kubectl ipkeeper %s:\n%s", strings.Join(tc.args, " "), r)
			}
		})
	}
}

// create creates obj and, for cluster-scoped objects, deletes it after the
// test (namespaced ones go with the test's namespace).
func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := cp.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	if obj.GetNamespace() == "" {
		t.Cleanup(func() {
			if err := cp.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %T %s: %v", obj, obj.GetName(), err)
			}
		})
	}
}

// cliPool creates an IPPool with one range and writes status (when given)
// as the pool status controller would.
func cliPool(t testing.TB, name string, r ipkeeperv1alpha1.PoolRange, status *ipkeeperv1alpha1.IPPoolStatus) *ipkeeperv1alpha1.IPPool {
	t.Helper()
	p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{r}}}
	create(t, p)
	if status != nil {
		p.Status = *status
		if err := cp.Client.Status().Update(context.Background(), p); err != nil {
			t.Fatalf("writing the status of IPPool %s: %v", name, err)
		}
	}
	return p
}

// cliReservation creates the reservation of ip in pool for owner, as the
// agent would name and fill it.
func cliReservation(t testing.TB, pool, network, ip string, owner ipkeeperv1alpha1.ReservationOwner, tweak ...func(*ipkeeperv1alpha1.IPReservationSpec)) *ipkeeperv1alpha1.IPReservation {
	t.Helper()
	r := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(pool, netip.MustParseAddr(ip))},
		Spec:       ipkeeperv1alpha1.IPReservationSpec{Pool: pool, Network: network, IP: ip, Owner: owner},
	}
	if owner.Kind == ipkeeperv1alpha1.OwnerPod {
		r.Spec.InterfaceName, r.Spec.Node, r.Spec.ContainerID = "net1", "node-a", "c0ffee"
	}
	for _, f := range tweak {
		f(&r.Spec)
	}
	create(t, r)
	return r
}

// cliPod creates a pod (it stays Pending: no scheduler or kubelet here).
func cliPod(t testing.TB, ns, name string, tweak ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	for _, f := range tweak {
		f(p)
	}
	create(t, p)
	return p
}

// podOwner is the reservation owner for a pod.
func podOwner(p *corev1.Pod) ipkeeperv1alpha1.ReservationOwner {
	return ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// goneOwner is an owner that never existed (a UID nobody has).
func goneOwner(kind ipkeeperv1alpha1.OwnerKind, ns, name string) ipkeeperv1alpha1.ReservationOwner {
	return ipkeeperv1alpha1.ReservationOwner{Kind: kind, Namespace: ns, Name: name, UID: types.UID("00000000-dead-" + name)}
}

// cliEvent records an event about obj, as kubelet or a controller would.
func cliEvent(t testing.TB, obj client.Object, kind, eventType, reason, message string, count int32) {
	t.Helper()
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: obj.GetNamespace(), GenerateName: obj.GetName() + "."},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()},
		Type:           eventType, Reason: reason, Message: message, Count: count,
		FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "kubelet", Host: "node-a"},
	}
	create(t, e)
}

func ptrTime(t time.Time) *metav1.Time { mt := metav1.NewTime(t); return &mt }
