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
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/handover"
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
// the source keeps it and the receiver's claim is made anew, waiting.
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
					dlmLogTrace(t, m)
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

	t.Run("failed", func(t *testing.T) {
		m, ip, watch, recvVM := move(t, "vm2", "move-vm2-"+suffix)
		before, err := recv.claim(ctx, "vm2r.blue")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.FailAfterStart(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the address to be taken back by the source's claim", func(ctx context.Context) (bool, error) {
			r := reservationOfIP(t, network, ip)
			return r.Spec.Owner.Namespace == e.ns && r.Spec.Owner.Name == "vm2.blue" && r.Spec.LentTo == nil, nil
		})
		waitFor(t, "the receiver's claim to be released and made anew, waiting", func(ctx context.Context) (bool, error) {
			c, err := recv.claim(ctx, "vm2r.blue")
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return c.UID != before.UID && len(c.Status.IPs) == 0 && c.Annotations[claimstatus.ReceiverAnnotation] == claimstatus.ReceiverWaiting, nil
		})
		if src := waitFilled(t, e.ns, "vm2.blue"); !slices.Equal(src.Status.IPs, []string{ip + "/24"}) {
			t.Fatalf("the source's claim records %v after the failure, want %s/24", src.Status.IPs, ip)
		}
		waitEvent(t, recvVM, string(handover.ReasonTakenBack), ip)
		if bad := watch(); len(bad) > 0 {
			t.Fatalf("the running VM's address was not held throughout: %v", bad)
		}
	})
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
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces}}}
	}
	if err := cp.Client.Update(ctx, &cfg); err != nil {
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
