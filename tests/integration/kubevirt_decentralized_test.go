// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/handover"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestVMMovedToAnotherNamespaceKeepsItsAddresses: KubeVirt's
// decentralized live migration moves a running VM of namespace A to a
// receiver VM (runStrategy WaitAsReceiver) of namespace B, driven by the
// real virt-controller v1.8.2; KubeVirt's synchronization controller and
// virt-handler are simulated (framework.KubeVirt.DecentralizedSimulated),
// as are the scheduler and the kubelet, whose CNI ADD goes to the real
// ipkeeper agent of each node. The receiver's claim waits, holding
// nothing; the target launcher in B gets the source's address while the
// source still runs with it (lent: one owner, never free); on success the
// receiver's claim owns it and the source's claim is released; on failure
// (before or after the migration started) the source keeps it and the
// receiver's claim is made anew, waiting. What KubeVirt does around it is
// checked too (completedKV, failedKV), so the simulation lets the real
// virt-controller do its part.
func TestVMMovedToAnotherNamespaceKeepsItsAddresses(t *testing.T) {
	ctx := context.Background()
	e, recv := startDecentralizedEnv(t)
	widenWebhook(t, e.ctrl.WebhookConfig, e.ns, recv.ns)

	suffix := e.ns[len(e.ns)-5:]
	network := "dlm-" + suffix
	conf := json.RawMessage(bridgeNAD(network, true))
	e.nad(t, "blue", string(conf))
	recv.nad(t, "blue", string(conf))
	removeReservationsAtEnd(t, func(r *ipkeeperv1alpha1.IPReservation) bool { return r.Spec.Network == network })
	nodeA, nodeB := "node-dlm-a-"+suffix, "node-dlm-b-"+suffix
	agents := map[string]*framework.Agent{nodeA: cp.StartAgent(t, nodeA), nodeB: cp.StartAgent(t, nodeB)}
	var mu sync.Mutex
	added := map[string][]string{} // "<ns>/<pod>" -> the addresses its ADD returned
	runThroughAgents(e.kv, agents, func(string) json.RawMessage { return conf }, func(pod *corev1.Pod, ips []string) {
		mu.Lock()
		defer mu.Unlock()
		added[pod.Namespace+"/"+pod.Name] = append(added[pod.Namespace+"/"+pod.Name], ips...)
	})
	t.Log("with a kubelet that runs CNI ADD through the node's ipkeeper agent: " + e.kv.Simulated())
	t.Log(e.kv.DecentralizedSimulated())
	blue := framework.VMNetwork{Name: "blue", NAD: "blue"}

	// move starts vm on node A, makes its receiver in B, checks the
	// receiver's claim waits, migrates to node B and checks both launchers
	// run with the source's address, lent. It watches the address's
	// reservation throughout: held, by one of the two claims, never
	// released or gone.
	move := func(t *testing.T, name, id string) (*framework.DecentralizedMigration, string, func() []string, *kubevirtv1.VirtualMachine) {
		t.Helper()
		srcVM, err := e.kv.CreateVM(ctx, e.ns, name, blue)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dlmDeleteVM(t, e.kv, srcVM) })
		e.waitClaim(t, name+".blue")
		srcVMI, _, err := e.kv.Start(ctx, srcVM, nodeA)
		if err != nil {
			t.Fatal(err)
		}
		ip := strings.SplitN(waitFilled(t, e.ns, name+".blue").Status.IPs[0], "/", 2)[0]
		recvVM, _, err := e.kv.CreateReceiverVM(ctx, recv.ns, name+"r", blue)
		if recvVM != nil {
			t.Cleanup(func() { dlmDeleteVM(t, e.kv, recvVM) })
		}
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the receiver's claim, waiting for the source's addresses", func(ctx context.Context) (bool, error) {
			c, err := recv.claim(ctx, name+"r.blue")
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionIPsAllocated)
			return c.Annotations[claimstatus.ReceiverAnnotation] == claimstatus.ReceiverWaiting && len(c.Status.IPs) == 0 &&
				cond != nil && cond.Reason == claimstatus.ReasonWaitingForSource, nil
		})
		watch := watchHeld(t, network, ip, naming.Claim(name, "blue"), naming.Claim(name+"r", "blue"))
		m, err := e.kv.StartDecentralizedMigration(ctx, srcVMI, recvVM, nodeB, id)
		if m != nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("decentralized migration trace:\n%s", strings.Join(m.Trace, "\n"))
				}
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := added[m.TargetPod.Namespace+"/"+m.TargetPod.Name]
		mu.Unlock()
		if !slices.Equal(got, []string{ip}) {
			t.Fatalf("the receiver's launcher %s/%s got %v, want the source's %s", m.TargetPod.Namespace, m.TargetPod.Name, got, ip)
		}
		r := reservationOfIP(t, network, ip)
		if o := r.Spec.Owner; o.Namespace != e.ns || o.Name != name+".blue" || r.Spec.LentTo == nil || r.Spec.LentTo.Namespace != recv.ns || r.Spec.LentTo.Name != name+"r.blue" {
			t.Fatalf("while both run: %s owned by %s/%s, lent to %+v; want %s/%s.blue's, lent to %s/%sr.blue", ip, o.Namespace, o.Name, r.Spec.LentTo, e.ns, name, recv.ns, name)
		}
		if src := waitFilled(t, e.ns, name+".blue"); !slices.Equal(src.Status.IPs, []string{ip + "/24"}) {
			t.Fatalf("the source's claim records %v while both run, want %s/24", src.Status.IPs, ip)
		}
		return m, ip, watch, recvVM
	}

	t.Run("succeeded", func(t *testing.T) {
		m, ip, watch, recvVM := move(t, "vm1", "move-vm1-"+suffix)
		if err := m.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		completedKV(t, m, recvVM, nodeB)
		waitFor(t, "the address to pass to the receiver's claim", func(ctx context.Context) (bool, error) {
			r := reservationOfIP(t, network, ip)
			return r.Spec.Owner.Namespace == recv.ns && r.Spec.Owner.Name == "vm1r.blue" && r.Spec.LentTo == nil, nil
		})
		if got := waitFilled(t, recv.ns, "vm1r.blue"); !slices.Equal(got.Status.IPs, []string{ip + "/24"}) || got.Annotations[claimstatus.HandedOverAnnotation] != "" {
			t.Fatalf("the receiver's claim records %v (handed over %q), want %s/24, its own", got.Status.IPs, got.Annotations[claimstatus.HandedOverAnnotation], ip)
		}
		waitFor(t, "the source's claim to be released and made anew for the halted source VM, with another address", func(ctx context.Context) (bool, error) {
			c, err := e.claim(ctx, "vm1.blue")
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return c.Annotations[claimstatus.HandedOverAnnotation] == "" && len(c.Status.IPs) == 1 && c.Status.IPs[0] != ip+"/24", nil
		})
		waitEvent(t, recvVM, string(handover.ReasonHandedOver), ip)
		if bad := watch(); len(bad) > 0 {
			t.Fatalf("the running VM's address was not held throughout: %v", bad)
		}
	})

	// A migration that fails before it started (the target launcher
	// dies: the receiver VMI's migration state says failed) or after
	// (libvirt fails on the source: KubeVirt v1.8.2 then marks only the
	// receiving migration failed).
	for i, tc := range []struct {
		name string
		fail func(*framework.DecentralizedMigration, context.Context) error
	}{
		{"failed before it started", (*framework.DecentralizedMigration).Fail},
		{"failed after it started", (*framework.DecentralizedMigration).FailAfterStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := fmt.Sprintf("vm%d", i+2)
			m, ip, watch, recvVM := move(t, vm, "move-"+vm+"-"+suffix)
			before, err := recv.claim(ctx, vm+"r.blue")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.fail(m, ctx); err != nil {
				t.Fatal(err)
			}
			failedKV(t, m, recvVM, nodeA)
			waitFor(t, "the address to be taken back by the source's claim", func(ctx context.Context) (bool, error) {
				r := reservationOfIP(t, network, ip)
				return r.Spec.Owner.Namespace == e.ns && r.Spec.Owner.Name == vm+".blue" && r.Spec.LentTo == nil, nil
			})
			waitFor(t, "the receiver's claim to be released and made anew, waiting", func(ctx context.Context) (bool, error) {
				c, err := recv.claim(ctx, vm+"r.blue")
				if err != nil {
					return false, client.IgnoreNotFound(err)
				}
				return c.UID != before.UID && len(c.Status.IPs) == 0 && c.Annotations[claimstatus.ReceiverAnnotation] == claimstatus.ReceiverWaiting, nil
			})
			if src := waitFilled(t, e.ns, vm+".blue"); !slices.Equal(src.Status.IPs, []string{ip + "/24"}) {
				t.Fatalf("the source's claim records %v after the failure, want %s/24", src.Status.IPs, ip)
			}
			waitEvent(t, recvVM, string(handover.ReasonTakenBack), ip)
			if bad := watch(); len(bad) > 0 {
				t.Fatalf("the running VM's address was not held throughout: %v", bad)
			}
		})
	}
}

// completedKV checks what KubeVirt did at a successful decentralized
// migration, as the simulation must let it: the source VM halted and its
// VMI gone (or Succeeded), the receiver VM's runStrategy restored, its VMI
// Running on node with the target pod, both migrations Succeeded.
func completedKV(t *testing.T, m *framework.DecentralizedMigration, recvVM *kubevirtv1.VirtualMachine, node string) {
	t.Helper()
	ctx := context.Background()
	src := &kubevirtv1.VirtualMachine{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: m.Source.Namespace, Name: m.Source.Name}, src); err != nil {
		t.Fatal(err)
	}
	if src.Spec.RunStrategy == nil || *src.Spec.RunStrategy != kubevirtv1.RunStrategyHalted {
		t.Errorf("source VM runStrategy = %v, want Halted", src.Spec.RunStrategy)
	}
	var gone kubevirtv1.VirtualMachineInstance
	err := cp.Client.Get(ctx, client.ObjectKeyFromObject(m.Source), &gone)
	if err == nil && gone.UID == m.Source.UID && gone.Status.Phase != kubevirtv1.Succeeded {
		t.Errorf("source VMI is %s, want gone or Succeeded", gone.Status.Phase)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	live := &kubevirtv1.VirtualMachine{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(recvVM), live); err != nil {
		t.Fatal(err)
	}
	if live.Spec.RunStrategy == nil || *live.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("receiver VM runStrategy = %v, want Always (its restore-run-strategy)", live.Spec.RunStrategy)
	}
	r := &kubevirtv1.VirtualMachineInstance{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(m.Receiver), r); err != nil {
		t.Fatal(err)
	}
	if r.Status.Phase != kubevirtv1.Running || r.Status.NodeName != node || r.IsMigrationTarget() {
		t.Errorf("receiver VMI %s on %q (still a migration target: %t), want Running on %s", r.Status.Phase, r.Status.NodeName, r.IsMigrationTarget(), node)
	}
	if _, ok := r.Status.ActivePods[m.TargetPod.UID]; !ok {
		t.Errorf("receiver VMI's active pods %v, want the target pod %s", r.Status.ActivePods, m.TargetPod.UID)
	}
	for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
		if mig.Status.Phase != kubevirtv1.MigrationSucceeded {
			t.Errorf("migration %s/%s is %s, want Succeeded", mig.Namespace, mig.Name, mig.Status.Phase)
		}
	}
}

// failedKV checks what KubeVirt did at a failed decentralized migration:
// the source VMI still Running on node with its pod, the target pod down,
// both migrations Failed, the receiver VM waiting for a migration again.
func failedKV(t *testing.T, m *framework.DecentralizedMigration, recvVM *kubevirtv1.VirtualMachine, node string) {
	t.Helper()
	ctx := context.Background()
	s := &kubevirtv1.VirtualMachineInstance{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(m.Source), s); err != nil {
		t.Fatal(err)
	}
	if s.UID != m.Source.UID || s.Status.Phase != kubevirtv1.Running || s.Status.NodeName != node {
		t.Errorf("source VMI %s on %q, want Running on %s", s.Status.Phase, s.Status.NodeName, node)
	}
	if got := dlmPod(t, m.SourcePod); got.Status.Phase != corev1.PodRunning || got.DeletionTimestamp != nil {
		t.Errorf("source pod %s is %s (deleting %t), want Running", got.Name, got.Status.Phase, got.DeletionTimestamp != nil)
	}
	var target corev1.Pod
	err := cp.Client.Get(ctx, client.ObjectKeyFromObject(m.TargetPod), &target)
	if err == nil && target.UID == m.TargetPod.UID && target.Status.Phase != corev1.PodFailed {
		t.Errorf("target pod %s is %s, want gone or Failed", target.Name, target.Status.Phase)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
		if mig.Status.Phase != kubevirtv1.MigrationFailed {
			t.Errorf("migration %s/%s is %s, want Failed", mig.Namespace, mig.Name, mig.Status.Phase)
		}
	}
	waitFor(t, "receiver VM "+recvVM.Name+" WaitingForReceiver", func(ctx context.Context) (bool, error) {
		vm := &kubevirtv1.VirtualMachine{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(recvVM), vm); err != nil {
			return false, err
		}
		return vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusWaitingForReceiver &&
			vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyWaitAsReceiver, nil
	})
}

// dlmDeleteVM deletes vm and waits until it and its VMI are gone.
func dlmDeleteVM(t *testing.T, kv *framework.KubeVirt, vm *kubevirtv1.VirtualMachine) {
	t.Helper()
	if err := kv.DeleteVM(context.Background(), vm, metav1.DeletePropagationForeground); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting VM %s/%s: %v", vm.Namespace, vm.Name, err)
	}
}

func dlmPod(t *testing.T, pod *corev1.Pod) corev1.Pod {
	t.Helper()
	var live corev1.Pod
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &live); err != nil {
		t.Fatalf("reading pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return live
}

// startDecentralizedEnv is startKubeVirtEnv with KubeVirt's
// DecentralizedLiveMigration gate on, and a second namespace for the
// receivers, whose VMs are stopped and deleted, and their claims
// released, before it goes (cleanups run last first).
func startDecentralizedEnv(t *testing.T) (e, recv *kvEnv) {
	t.Helper()
	e = startKubeVirtEnv(t)
	if err := framework.SetKubeVirtGate(context.Background(), cp.Client, framework.DecentralizedLiveMigrationGate, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := framework.SetKubeVirtGate(context.Background(), cp.Client, framework.DecentralizedLiveMigrationGate, false); err != nil {
			t.Errorf("turning %s off again: %v", framework.DecentralizedLiveMigrationGate, err)
		}
	})
	recv = &kvEnv{ns: cp.NewNamespace(t, "kvrecv"), kv: e.kv, ctrl: e.ctrl}
	t.Cleanup(func() { recv.settle(t) })
	return e, recv
}

// widenWebhook lets the test's webhook configuration (one namespace's)
// admit the launchers of these namespaces, as an installed one admits
// every namespace's.
func widenWebhook(t *testing.T, name string, namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	// ipkeeper-controller writes the configuration too (its CA bundle):
	// read it again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &cfg); err != nil {
			return err
		}
		for i := range cfg.Webhooks {
			cfg.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces}}}
		}
		return cp.Client.Update(ctx, &cfg)
	}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if err := cp.WaitWebhookCalled(ctx, ns); err != nil {
			t.Fatalf("the webhook for namespace %s: %v", ns, err)
		}
	}
}

func reservationOfIP(t *testing.T, network, ip string) *ipkeeperv1alpha1.IPReservation {
	t.Helper()
	var r ipkeeperv1alpha1.IPReservation
	if err := cp.Client.Get(context.Background(), keyOf(naming.Reservation(naming.InlinePool(network), netip.MustParseAddr(ip))), &r); err != nil {
		t.Fatalf("the reservation of %s: %v", ip, err)
	}
	return &r
}

// watchHeld polls the address's reservation until the returned function
// is called, which returns what was wrong: gone, released, or held by a
// claim other than the two named.
func watchHeld(t *testing.T, network, ip string, claims ...string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var bad []string
	done := make(chan struct{})
	key := keyOf(naming.Reservation(naming.InlinePool(network), netip.MustParseAddr(ip)))
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var r ipkeeperv1alpha1.IPReservation
			err := cp.Client.Get(ctx, key, &r)
			switch {
			case ctx.Err() != nil:
			case apierrors.IsNotFound(err):
				bad = append(bad, time.Now().Format("15:04:05.000")+" gone")
			case err != nil:
			case r.Spec.Released() || !slices.Contains(claims, r.Spec.Owner.Name):
				bad = append(bad, fmt.Sprintf("%s owner %s released %v", time.Now().Format("15:04:05.000"), r.Spec.Owner.Name, r.Spec.Released()))
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})
	return func() []string {
		stopped = true
		cancel()
		<-done
		return bad
	}
}
