// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

var (
	pod   = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerPod, Namespace: "ns", Name: "web-0", UID: "pod-uid"}
	claim = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAMClaim, Namespace: "ns", Name: "vm1.blue", UID: "claim-uid"}
)

func newClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func TestNew(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	at := ptr.To(metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	for _, tt := range []struct {
		name       string
		p          Params
		wantLabels map[string]string
	}{
		{"borrowed: shared", Params{Pool: "blue", Key: "blue", Network: "blue", IP: ip, Owner: claim, Interface: "pod1a2b"},
			map[string]string{naming.NetworkLabel: "blue", naming.OwnerKindLabel: "IPAMClaim", naming.NodeLabel: naming.SharedNodeLabelValue}},
		{"in a claims' block", Params{Pool: "blue", Key: "blue", Network: "blue", IP: ip, Owner: claim, Block: ClaimsBlock},
			map[string]string{naming.NetworkLabel: "blue", naming.OwnerKindLabel: "IPAMClaim", naming.ClaimsBlockLabel: "true"}},
		{"in a node's block", Params{Pool: "blue", Key: "k", Network: "blue", IP: ip, Owner: pod, Interface: "net1", ContainerID: "c1", Node: "n1", AttachedAt: at, Block: NodeBlock},
			map[string]string{naming.NetworkLabel: "blue", naming.OwnerKindLabel: "Pod", naming.NodeLabel: "n1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := New(tt.p)
			if r.Name != naming.Reservation(tt.p.Key, ip) {
				t.Errorf("name %s, want %s", r.Name, naming.Reservation(tt.p.Key, ip))
			}
			if len(r.Labels) != len(tt.wantLabels) {
				t.Errorf("labels %v, want %v", r.Labels, tt.wantLabels)
			}
			for k, v := range tt.wantLabels {
				if r.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, r.Labels[k], v)
				}
			}
			want := v1alpha1.IPReservationSpec{Pool: tt.p.Pool, Network: tt.p.Network, IP: "10.0.0.5", Owner: tt.p.Owner, InterfaceName: tt.p.Interface,
				ContainerID: tt.p.ContainerID, Node: tt.p.Node, AttachedAt: tt.p.AttachedAt}
			if r.Spec != want {
				t.Errorf("spec %+v, want %+v", r.Spec, want)
			}
		})
	}
}

func TestHeldBy(t *testing.T) {
	res := func(o v1alpha1.ReservationOwner, ifName string, released bool) *v1alpha1.IPReservation {
		r := &v1alpha1.IPReservation{Spec: v1alpha1.IPReservationSpec{Owner: o, InterfaceName: ifName}}
		if released {
			r.Spec.ReuseAfter = &metav1.Time{Time: time.Now()}
		}
		return r
	}
	recreated := claim
	recreated.UID = "an-earlier-claim-of-that-name"
	for _, tt := range []struct {
		name   string
		r      *v1alpha1.IPReservation
		owner  v1alpha1.ReservationOwner
		ifName string
		want   bool
	}{
		{"the pod's, same interface", res(pod, "net1", false), pod, "net1", true},
		{"the pod's, another interface", res(pod, "net2", false), pod, "net1", false},
		{"the claim's, whatever the interface", res(claim, "old", false), claim, "new", true},
		{"released", res(claim, "", true), claim, "", false},
		{"an earlier owner of the same name", res(recreated, "", false), claim, "", false},
		{"another kind, same UID", res(v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, UID: claim.UID}, "", false), claim, "", false},
	} {
		if got := HeldBy(tt.r, tt.owner, tt.ifName); got != tt.want {
			t.Errorf("%s: HeldBy = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestKeptFor(t *testing.T) {
	retired := func(name string, uid types.UID, released bool) *v1alpha1.IPReservation {
		r := &v1alpha1.IPReservation{Spec: v1alpha1.IPReservationSpec{Owner: v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: name, UID: uid}}}
		if released {
			r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour)}
		}
		return r
	}
	aliases := []string{"vm1.blue.net-b.0123"}
	gone := func(o v1alpha1.ReservationOwner) bool { return o.UID == "earlier" }
	for _, tt := range []struct {
		name     string
		r        *v1alpha1.IPReservation
		retained bool
		want     bool
	}{
		{"an earlier claim of its name, released", retired(claim.Name, "earlier", true), false, true},
		{"an earlier claim of an alias, released", retired(aliases[0], "earlier", true), false, true},
		{"an earlier claim of another name", retired("vm2.blue", "earlier", true), false, false},
		{"its own", retired(claim.Name, claim.UID, true), false, false},
		{"not released yet, its claim gone, in a pool that retains", retired(aliases[0], "earlier", false), true, true},
		{"not released yet, in a pool that does not", retired(claim.Name, "earlier", false), false, false},
		{"not released yet, an earlier claim of its name, in a pool that retains", retired(claim.Name, "earlier-too", false), true, true},
		{"a live claim of an alias, released (a superseded address)", retired(aliases[0], "live", true), true, true},
	} {
		if got := KeptFor(tt.r, Claimant{Owner: claim, Aliases: aliases, Gone: gone}, tt.retained); got != tt.want {
			t.Errorf("%s: KeptFor = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestKeptForNeverTakesALiveClaimsAddress: an unreleased reservation of
// a claim that exists is that claim's, in use, and is kept for no other:
// in a pool two networks share, with a cooldown, the source claim of a
// live NAD swap holds the running VM's address under the plain name,
// which is an alias of the swapped claim.
func TestKeptForNeverTakesALiveClaimsAddress(t *testing.T) {
	swapped := v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: "vm1.blue.net-b.0123", UID: "swapped-uid"}
	source := &v1alpha1.IPReservation{Spec: v1alpha1.IPReservationSpec{Owner: claim}} // vm1.blue, running
	for _, tt := range []struct {
		name string
		gone func(v1alpha1.ReservationOwner) bool
	}{
		{"not known gone", nil},
		{"read: still there", func(v1alpha1.ReservationOwner) bool { return false }},
	} {
		for _, retained := range []bool{true, false} {
			c := Claimant{Owner: swapped, Aliases: []string{claim.Name}, Gone: tt.gone}
			if KeptFor(source, c, retained) {
				t.Errorf("%s, pool retains %v: the running source claim's reservation is kept for the swapped claim", tt.name, retained)
			}
		}
	}
}

func TestCreateOrAdopt(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	mine := Params{Pool: "blue", Key: "blue", Network: "blue", IP: ip, Owner: pod, Interface: "net1"}
	other := mine
	other.Owner = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerPod, Namespace: "ns", Name: "db-0", UID: "db-uid"}
	for _, tt := range []struct {
		name        string
		existing    *v1alpha1.IPReservation
		wantAdopted bool
		wantTaken   bool
	}{
		{name: "free"},
		{name: "the holder's already (a lost answer)", existing: New(mine), wantAdopted: true},
		{name: "someone else's", existing: New(other), wantTaken: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var objs []client.Object
			if tt.existing != nil {
				objs = append(objs, tt.existing)
			}
			s := KubeStore{Client: newClient(t, objs...)}
			got, adopted, err := CreateOrAdopt(context.Background(), s, New(mine))
			if tt.wantTaken {
				var te *TakenError
				if !errors.Is(err, ErrTaken) || !errors.As(err, &te) || te.Holder.Spec.Owner != other.Owner {
					t.Fatalf("CreateOrAdopt = %v, %v; want a TakenError naming the holder", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if adopted != tt.wantAdopted || got.ResourceVersion == "" || got.Spec.Owner != pod {
				t.Errorf("CreateOrAdopt = %+v, adopted %v; want the holder's, adopted %v", got, adopted, tt.wantAdopted)
			}
		})
	}
}

// A name taken by a reservation that cannot be read is still taken, but
// without a holder to describe.
func TestCreateOrAdoptUnreadHolder(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	p := Params{Pool: "blue", Key: "blue", Network: "blue", IP: ip, Owner: pod, Interface: "net1"}
	c := newClient(t, New(p))
	s := KubeStore{Client: c, Live: interceptor.NewClient(c, interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("the API server is away")
		},
	})}
	p.Owner.UID = "another"
	_, _, err := CreateOrAdopt(context.Background(), s, New(p))
	var te *TakenError
	if !errors.Is(err, ErrTaken) || !errors.As(err, &te) || te.Holder != nil || !strings.Contains(err.Error(), "the API server is away") {
		t.Errorf("CreateOrAdopt = %v, want ErrTaken with the read's error and no holder", err)
	}
}

func TestHunt(t *testing.T) {
	calls := 0
	got, err := Hunt(func() (int, error) {
		calls++
		if calls < 3 {
			return 0, &TakenError{Name: "r", Holder: &v1alpha1.IPReservation{}}
		}
		return calls, nil
	})
	if err != nil || got != 3 {
		t.Errorf("Hunt = %d, %v; want the third candidate", got, err)
	}
	calls = 0
	if _, err := Hunt(func() (int, error) { calls++; return 0, ErrTaken }); !errors.Is(err, ErrCollisions) || calls != MaxCollisions {
		t.Errorf("Hunt of taken candidates = %v after %d attempts, want ErrCollisions after %d", err, calls, MaxCollisions)
	}
	boom := errors.New("boom")
	calls = 0
	if _, err := Hunt(func() (int, error) { calls++; return 0, boom }); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("Hunt = %v after %d attempts, want the first attempt's error", err, calls)
	}
}

func TestDescribeHolder(t *testing.T) {
	reuseAt := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	res := func(o v1alpha1.ReservationOwner, released bool) *v1alpha1.IPReservation {
		r := &v1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "blue.10-0-0-5"}, Spec: v1alpha1.IPReservationSpec{Pool: "blue", Owner: o}}
		if released {
			r.Spec.ReuseAfter = &metav1.Time{Time: reuseAt}
		}
		return r
	}
	otherNS := v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerPod, Namespace: "secret-team", Name: "db-0", UID: "u2"}
	for _, tt := range []struct {
		name string
		r    *v1alpha1.IPReservation
		want string
	}{
		{"in the namespace", res(pod, false), "is already reserved by Pod ns/web-0 (reservation blue.10-0-0-5)"},
		{"a claim in the namespace", res(claim, false), "is already reserved by IPAMClaim ns/vm1.blue (reservation blue.10-0-0-5)"},
		{"another namespace's", res(otherNS, false), "is already reserved by a workload in another namespace (reservation blue.10-0-0-5)"},
		{"unread", nil, "is already reserved by a workload in another namespace (reservation blue.10-0-0-5)"},
		{"released, cooling down", res(otherNS, true), `was released by its previous holder and cools down until 2026-01-01T00:01:00Z (IPPool "blue" reuseCooldown)`},
	} {
		got := DescribeHolder("blue.10-0-0-5", tt.r, "ns")
		if got != tt.want {
			t.Errorf("%s: DescribeHolder = %q, want %q", tt.name, got, tt.want)
		}
		if strings.Contains(got, "secret-team") || strings.Contains(got, "db-0") {
			t.Errorf("%s: %q names another namespace's objects", tt.name, got)
		}
	}
}

// KubeStore maps the API server's answers onto the error contract.
func TestKubeStoreErrors(t *testing.T) {
	ctx := context.Background()
	p := Params{Pool: "blue", Key: "blue", Network: "blue", IP: netip.MustParseAddr("10.0.0.5"), Owner: pod, Interface: "net1"}
	r := New(p)
	r.UID = "r-uid"
	s := KubeStore{Client: newClient(t, r)}
	r, err := s.Get(ctx, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, New(p)); !errors.Is(err, ErrTaken) {
		t.Errorf("second Create = %v, want ErrTaken", err)
	}
	if _, err := s.Get(ctx, "nothing"); !errors.Is(err, ErrGone) {
		t.Errorf("Get of a missing one = %v, want ErrGone", err)
	}
	if err := s.Delete(ctx, r.Name, r.UID, "1"+r.ResourceVersion); !errors.Is(err, ErrChanged) {
		t.Errorf("Delete of another version = %v, want ErrChanged", err)
	}
	if _, err := s.Retire(ctx, r.Name, r.UID, "1"+r.ResourceVersion, time.Now()); !errors.Is(err, ErrChanged) {
		t.Errorf("Retire of another version = %v, want ErrChanged", err)
	}
	got, err := ReleaseAt(ctx, s, r.Name, r.UID, r.ResourceVersion, Decide(time.Minute, time.Now()))
	if err != nil || !got.Spec.Released() {
		t.Fatalf("ReleaseAt with a cooldown = %+v, %v; want it retired", got, err)
	}
	if err := Discard(ctx, s, r.Name, r.UID, r.ResourceVersion); !errors.Is(err, ErrChanged) {
		t.Errorf("Discard of the version before the retire = %v, want ErrChanged", err)
	}
	if err := Discard(ctx, s, r.Name, r.UID, got.ResourceVersion); err != nil {
		t.Errorf("Discard = %v", err)
	}
	if err := Discard(ctx, s, r.Name, r.UID, ""); !errors.Is(err, ErrGone) {
		t.Errorf("Discard of a deleted one = %v, want ErrGone", err)
	}
}
