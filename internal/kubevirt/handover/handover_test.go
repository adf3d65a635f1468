// SPDX-License-Identifier: Apache-2.0

package handover

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// world is a source VM vm1 in namespace a, sending with migrationID m1,
// and its receiver vm1r in namespace b, synchronised by KubeVirt, each
// with its claim of network blue.
type world struct {
	c       client.Client
	r       *Reconciler
	rec     *record.FakeRecorder
	srcRes  string
	srcCl   *ipamclaimsv1alpha1.IPAMClaim
	recvCl  *ipamclaimsv1alpha1.IPAMClaim
	recvKey types.NamespacedName
}

func vmiOf(ns, name, uid, vmUID string) *kubevirtv1.VirtualMachineInstance {
	return &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: name, UID: types.UID(vmUID), Controller: ptr(true)}}}}
}

func ptr[T any](v T) *T { return &v }

func claimOf(ns, vm, vmUID, uid string) *ipamclaimsv1alpha1.IPAMClaim {
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm + ".blue", UID: types.UID(uid),
		Annotations: map[string]string{claimstatus.LogicalNetworkAnnotation: "blue"}},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue"}}
	claimowner.Record(c, claimowner.Owner{Kind: claimowner.KindVM, Name: vm, UID: types.UID(vmUID)})
	return c
}

func newWorld(t *testing.T, receiveID string) *world {
	t.Helper()
	src := vmiOf("a", "vm1", "vmi-a", "vm-a")
	src.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
		SourceState: &kubevirtv1.VirtualMachineInstanceMigrationSourceState{VirtualMachineInstanceCommonMigrationState: kubevirtv1.VirtualMachineInstanceCommonMigrationState{MigrationUID: "mig-a"}}}
	send := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "move-vm1", UID: "mig-a"},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm1", SendTo: &kubevirtv1.VirtualMachineInstanceMigrationSource{MigrationID: "m1", ConnectURL: "sync:9185"}}}
	recv := vmiOf("b", "vm1r", "vmi-b", "vm-b")
	recv.Annotations = map[string]string{kubevirtv1.CreateMigrationTarget: "true"}
	recv.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
		SourceState: &kubevirtv1.VirtualMachineInstanceMigrationSourceState{VirtualMachineInstanceCommonMigrationState: kubevirtv1.VirtualMachineInstanceCommonMigrationState{
			MigrationUID: "mig-a", VirtualMachineInstanceUID: ptr(types.UID("vmi-a"))}}}
	receive := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "receive", UID: "mig-b"},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm1r", Receive: &kubevirtv1.VirtualMachineInstanceMigrationTarget{MigrationID: receiveID}}}
	srcCl := claimOf("a", "vm1", "vm-a", "claim-a")
	srcCl.Status.IPs = []string{"10.0.0.5/24"}
	recvCl := claimOf("b", "vm1r", "vm-b", "claim-b")
	recvCl.Annotations[claimstatus.ReceiverAnnotation] = claimstatus.ReceiverWaiting
	res := &ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", netip.MustParseAddr("10.0.0.5"))},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Pool: "blue", Network: "blue", IP: "10.0.0.5",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "a", Name: srcCl.Name, UID: srcCl.UID}}}

	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(src, send, recv, receive, srcCl, recvCl, res).
		WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}, &kubevirtv1.VirtualMachineInstance{})
	ctx := context.Background()
	for _, setup := range []func(context.Context, client.FieldIndexer) error{SetupIndexes, claims.SetupIndexes, claims.SetupClaimIndexes, reservationindex.Setup} {
		if err := setup(ctx, builderIndexer{b}); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Build()
	rec := record.NewFakeRecorder(20)
	return &world{c: c, rec: rec, r: &Reconciler{Client: c, Reservations: c, Recorder: rec}, srcRes: res.Name, srcCl: srcCl, recvCl: recvCl,
		recvKey: types.NamespacedName{Namespace: "b", Name: "vm1r"}}
}

func (w *world) reconcile(t *testing.T) {
	t.Helper()
	if _, err := w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: w.recvKey}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

func (w *world) reservation(t *testing.T) *ipkeeperv1alpha1.IPReservation {
	t.Helper()
	var r ipkeeperv1alpha1.IPReservation
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: w.srcRes}, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func (w *world) claim(t *testing.T, c *ipamclaimsv1alpha1.IPAMClaim) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var got ipamclaimsv1alpha1.IPAMClaim
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(c), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// setReceiver changes the receiver VMI's migration state and, once the
// claim recorded the lent address (as package claimaddrs does), its status.
func (w *world) setReceiver(t *testing.T, change func(*kubevirtv1.VirtualMachineInstanceMigrationState)) {
	t.Helper()
	ctx := context.Background()
	var vmi kubevirtv1.VirtualMachineInstance
	if err := w.c.Get(ctx, w.recvKey, &vmi); err != nil {
		t.Fatal(err)
	}
	change(vmi.Status.MigrationState)
	if err := w.c.Status().Update(ctx, &vmi); err != nil {
		t.Fatal(err)
	}
	cl := w.claim(t, w.recvCl)
	cl.Status.IPs = []string{"10.0.0.5/24"}
	if err := w.c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
}

// A synchronised receiver is lent its source's address; once the
// migration succeeded the address passes to it and the source's claim is
// marked to be released.
func TestLendThenPass(t *testing.T) {
	w := newWorld(t, "m1")
	w.reconcile(t)
	r := w.reservation(t)
	if r.Spec.LentTo == nil || r.Spec.LentTo.UID != w.recvCl.UID || r.Spec.Owner.UID != w.srcCl.UID {
		t.Fatalf("after the sync: owner %+v lentTo %+v, want the source's, lent to b/vm1r.blue", r.Spec.Owner, r.Spec.LentTo)
	}
	w.setReceiver(t, func(ms *kubevirtv1.VirtualMachineInstanceMigrationState) { ms.Completed = true })
	w.reconcile(t)
	r = w.reservation(t)
	if r.Spec.LentTo != nil || r.Spec.Owner.UID != w.recvCl.UID {
		t.Fatalf("after the success: owner %+v lentTo %+v, want the receiver's claim the owner", r.Spec.Owner, r.Spec.LentTo)
	}
	if got := w.claim(t, w.srcCl).Annotations[claimstatus.HandedOverAnnotation]; got == "" {
		t.Fatal("the source's claim is not marked handed over")
	}
	if got := w.claim(t, w.recvCl).Annotations[claimstatus.ReceiverAnnotation]; got != receivedValue {
		t.Fatalf("the receiver's claim has %s %q, want %q", claimstatus.ReceiverAnnotation, got, receivedValue)
	}
	// Later looks (the receiver migrating on, stopping) change nothing.
	w.setReceiver(t, func(ms *kubevirtv1.VirtualMachineInstanceMigrationState) { ms.Completed, ms.Failed = false, true })
	w.reconcile(t)
	if got := w.claim(t, w.recvCl).Annotations[claimstatus.HandedOverAnnotation]; got != "" {
		t.Fatalf("the receiver's claim, now the VM's, is marked handed over: %q", got)
	}
}

// A failed migration takes the address back and has the receiver's claim,
// which recorded it, released.
func TestLendThenTakeBack(t *testing.T) {
	w := newWorld(t, "m1")
	w.reconcile(t)
	w.setReceiver(t, func(ms *kubevirtv1.VirtualMachineInstanceMigrationState) { ms.Failed = true })
	w.reconcile(t)
	r := w.reservation(t)
	if r.Spec.LentTo != nil || r.Spec.Owner.UID != w.srcCl.UID {
		t.Fatalf("after the failure: owner %+v lentTo %+v, want the source's, lent to nobody", r.Spec.Owner, r.Spec.LentTo)
	}
	if got := w.claim(t, w.recvCl).Annotations[claimstatus.HandedOverAnnotation]; got == "" {
		t.Fatal("the receiver's claim, which recorded the source's address, is not marked to be released")
	}
	if got := w.claim(t, w.srcCl).Annotations[claimstatus.HandedOverAnnotation]; got != "" {
		t.Fatalf("the source's claim is marked handed over: %q", got)
	}
}

// A receiver whose migration receives with another migrationID than the
// source's sends with is not trusted: nothing is lent, its claim keeps
// waiting, and the Event says why without naming the other namespace's
// objects.
func TestUntrustedReceiverGetsNothing(t *testing.T) {
	w := newWorld(t, "guessed")
	w.reconcile(t)
	if r := w.reservation(t); r.Spec.LentTo != nil {
		t.Fatalf("lent to %+v", r.Spec.LentTo)
	}
	if got := w.claim(t, w.recvCl).Annotations[claimstatus.ReceiverAnnotation]; got != claimstatus.ReceiverWaiting {
		t.Fatalf("the receiver's claim has %s %q, want it still waiting", claimstatus.ReceiverAnnotation, got)
	}
	select {
	case ev := <-w.rec.Events:
		if !strings.Contains(ev, string(ReasonNotHandedOver)) || strings.Contains(ev, "move-vm1") || strings.Contains(ev, "vm1.blue") || strings.Contains(ev, `"a"`) {
			t.Fatalf("event %q, want %s naming nothing of namespace a", ev, ReasonNotHandedOver)
		}
	default:
		t.Fatal("no event tells why the receiver waits")
	}
}

func TestPhaseOf(t *testing.T) {
	uid := types.UID("src")
	synced := &kubevirtv1.VirtualMachineInstanceMigrationSourceState{VirtualMachineInstanceCommonMigrationState: kubevirtv1.VirtualMachineInstanceCommonMigrationState{MigrationUID: "m", VirtualMachineInstanceUID: &uid}}
	vmi := func(ms *kubevirtv1.VirtualMachineInstanceMigrationState, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		return &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{MigrationState: ms, Phase: phase}}
	}
	migration := func(phase kubevirtv1.VirtualMachineInstanceMigrationPhase) *kubevirtv1.VirtualMachineInstanceMigration {
		return &kubevirtv1.VirtualMachineInstanceMigration{Status: kubevirtv1.VirtualMachineInstanceMigrationStatus{Phase: phase}}
	}
	running := migration(kubevirtv1.MigrationRunning)
	for _, tt := range []struct {
		name    string
		vmi     *kubevirtv1.VirtualMachineInstance
		receive *kubevirtv1.VirtualMachineInstanceMigration
		want    Phase
	}{
		{"gone", nil, running, Failed},
		{"not synchronised", vmi(nil, kubevirtv1.WaitingForSync), running, Unsynced},
		{"not synchronised, no migration yet", vmi(nil, kubevirtv1.WaitingForSync), nil, Unsynced},
		{"synchronised", vmi(&kubevirtv1.VirtualMachineInstanceMigrationState{SourceState: synced}, kubevirtv1.WaitingForSync), running, Running},
		{"completed", vmi(&kubevirtv1.VirtualMachineInstanceMigrationState{SourceState: synced, Completed: true}, kubevirtv1.Running), nil, Succeeded},
		{"failed", vmi(&kubevirtv1.VirtualMachineInstanceMigrationState{SourceState: synced, Failed: true}, kubevirtv1.Failed), running, Failed},
		{"ended without completing", vmi(&kubevirtv1.VirtualMachineInstanceMigrationState{SourceState: synced}, kubevirtv1.Failed), running, Failed},
		// KubeVirt v1.8.2: a migration that failed after it started leaves
		// the receiver waiting, synchronised, neither completed nor failed.
		{"its migration failed", vmi(&kubevirtv1.VirtualMachineInstanceMigrationState{SourceState: synced}, kubevirtv1.WaitingForSync), migration(kubevirtv1.MigrationFailed), Failed},
		{"its migration deleted (cancelled)", vmi(&kubevirtv1.VirtualMachineInstanceMigrationState{SourceState: synced}, kubevirtv1.WaitingForSync), nil, Failed},
	} {
		if got := PhaseOf(tt.vmi, tt.receive); got != tt.want {
			t.Errorf("%s: PhaseOf = %v, want %v", tt.name, got, tt.want)
		}
	}
}
