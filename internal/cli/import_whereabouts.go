// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	wb "github.com/ipkeeper/ipkeeper/internal/cli/whereaboutsimport"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var importCommand = command{
	name:     "import",
	synopsis: "whereabouts [--dry-run] [-o FORMAT]",
	summary:  "Turn whereabouts' allocations into IPReservations, so addresses survive the switch of the NADs to ipkeeper.",
	formats:  formats(outputJSON, outputYAML),
	args: func(args []string) error {
		if len(args) != 1 || args[0] != "whereabouts" {
			return usageErrorf("import takes one argument, the IPAM to import from (whereabouts), got %q", strings.Join(args, " "))
		}
		return nil
	},
	setup: func(fs *pflag.FlagSet) runFunc {
		o := &importOptions{}
		fs.BoolVar(&o.dryRun, "dry-run", false, "print the plan, write nothing")
		return o.run
	},
}

type importOptions struct{ dryRun bool }

// Import actions.
const (
	importCreate   = "create"   // a reservation to make (made, without --dry-run)
	importExists   = "exists"   // already imported: the reservation is this holder's
	importConflict = "conflict" // the address is reserved in ipkeeper for someone else
	importSkip     = "skip"     // nothing to import: the pod is gone, no NAD uses the pool ...
)

// ImportStep is what the import does with one whereabouts allocation.
type ImportStep struct {
	// WhereaboutsPool is the whereabouts IPPool, namespace/name.
	WhereaboutsPool string `json:"whereaboutsPool"`
	IP              string `json:"ip"`
	// Pod is the allocation's podref, namespace/name.
	Pod         string `json:"pod"`
	Interface   string `json:"interface"`
	ContainerID string `json:"containerID,omitempty"`
	// NAD is the NetworkAttachmentDefinition the address is used through.
	NAD         string                             `json:"nad,omitempty"`
	Network     string                             `json:"network,omitempty"`
	Pool        string                             `json:"pool,omitempty"`
	Reservation string                             `json:"reservation,omitempty"`
	Owner       *ipkeeperv1alpha1.ReservationOwner `json:"owner,omitempty"`
	Action      string                             `json:"action"`
	Detail      string                             `json:"detail,omitempty"`

	ip     netip.Addr
	prefix netip.Prefix
	cfg    *ipamconfig.Config
	node   string
	claim  *ipamclaimsv1alpha1.IPAMClaim
	// key is what the reservation is named from (its pool's lock key).
	key string
}

// The whereabouts kinds the import reads, in the version whereaboutsimport
// follows.
var (
	wbPoolGVK        = schema.GroupVersionKind{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Kind: "IPPoolList"}
	wbOverlappingGVK = schema.GroupVersionKind{Group: "whereabouts.cni.cncf.io", Version: "v1alpha1", Kind: "OverlappingRangeIPReservationList"}
)

func (o *importOptions) run(ctx context.Context, s *session, _ []string) error {
	steps, problems, err := planWhereaboutsImport(ctx, s.client)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintf(s.errOut, "warning: %v\n", p)
	}
	if !o.dryRun {
		for i := range steps {
			if steps[i].Action == importCreate {
				if err := applyImportStep(ctx, s.client, &steps[i]); err != nil {
					return err
				}
			}
		}
	}
	if err := printImport(s, steps); err != nil {
		return err
	}
	counts := map[string]int{}
	for _, st := range steps {
		counts[st.Action]++
	}
	verb := "created"
	if o.dryRun {
		verb = "to create (dry run: nothing written)"
	}
	fmt.Fprintf(s.errOut, "%d reservations %s, %d already imported, %d skipped, %d conflicts.\n",
		counts[importCreate], verb, counts[importExists], counts[importSkip], counts[importConflict])
	if counts[importCreate] == 0 && counts[importConflict] == 0 {
		fmt.Fprintln(s.errOut, "Nothing to import: every allocation whose pod exists is already in ipkeeper.")
	}
	if counts[importConflict] > 0 {
		return fmt.Errorf("%d addresses are reserved in ipkeeper for someone else; they were left as they are (see the conflict lines)", counts[importConflict])
	}
	return nil
}

func printImport(s *session, steps []ImportStep) error {
	if len(steps) == 0 && s.output.isTable() {
		fmt.Fprintln(s.errOut, "No whereabouts allocations found.")
		return nil
	}
	if steps == nil {
		steps = []ImportStep{}
	}
	return s.print(printable{doc: steps, names: reservationNames(steps, func(st ImportStep) string { return st.Reservation }),
		table: func(w io.Writer, _ bool) error { return importTable(w, steps) }})
}

// importTable is the plan as a table, one allocation a row.
func importTable(w io.Writer, steps []ImportStep) error {
	t := newTable(w, "WHEREABOUTS-POOL", "IP", "POD", "INTERFACE", "NETWORK", "RESERVATION", "OWNER", "ACTION", "DETAIL")
	for _, st := range steps {
		owner := ""
		if st.Owner != nil {
			owner = ownerString(*st.Owner)
		}
		t.row(st.WhereaboutsPool, st.IP, st.Pod, st.Interface, st.Network, st.Reservation, owner, st.Action, st.Detail)
	}
	return t.flush()
}

// importWorld is what the plan is made from, read once.
type importWorld struct {
	c            client.Reader
	nets         []wb.Network
	nads         map[string]*nadv1.NetworkAttachmentDefinition
	reservations map[string]*ipkeeperv1alpha1.IPReservation
	// planned are the reservations this plan creates, so two allocations
	// of one address (two NADs sharing a range) are not both created.
	planned map[string]string
	// claims are read once, so the steps of one claim (two families)
	// update one object.
	claims map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim
	// pools are ipkeeper's IPPools, by name: a reservation's name comes
	// from its pool's lock key (IPPool.LockKey).
	pools map[string]*ipkeeperv1alpha1.IPPool
}

// planWhereaboutsImport reads whereabouts' objects and the NADs and decides
// what to do with every allocation. problems are objects that could not
// be read (reported, the rest still imported).
func planWhereaboutsImport(ctx context.Context, c client.Reader) (steps []ImportStep, problems []error, err error) {
	pools, err := listWhereabouts(ctx, c, wbPoolGVK)
	if err != nil {
		return nil, nil, err
	}
	overlapping, err := listWhereabouts(ctx, c, wbOverlappingGVK)
	if err != nil && !meta.IsNoMatchError(err) {
		return nil, nil, err
	}
	w := &importWorld{c: c, nads: map[string]*nadv1.NetworkAttachmentDefinition{}, reservations: map[string]*ipkeeperv1alpha1.IPReservation{}, planned: map[string]string{},
		claims: map[types.NamespacedName]*ipamclaimsv1alpha1.IPAMClaim{}, pools: map[string]*ipkeeperv1alpha1.IPPool{}}
	if w.nets, problems, err = w.readNADs(ctx); err != nil {
		return nil, nil, err
	}
	var pl ipkeeperv1alpha1.IPPoolList
	if err := c.List(ctx, &pl); err != nil {
		return nil, nil, fmt.Errorf("listing IPPools: %w", err)
	}
	for i := range pl.Items {
		w.pools[pl.Items[i].Name] = &pl.Items[i]
	}
	all, err := listReservations(ctx, c, "")
	if err != nil {
		return nil, nil, err
	}
	for i := range all {
		w.reservations[all[i].Name] = &all[i]
	}

	// An OverlappingRangeIPReservation names the holder of its address on
	// its network_name cluster-wide; whereabouts writes it with the pool
	// allocation. One that disagrees with the pool is reported, not guessed.
	overlap := map[string]wb.Overlapping{}
	for _, u := range overlapping {
		var spec wb.Overlapping
		if err := specInto(&u, &spec); err != nil {
			problems = append(problems, err)
			continue
		}
		overlap[u.GetNamespace()+"/"+u.GetName()] = spec
	}
	seenOverlap := map[string]bool{}
	for _, u := range pools {
		p := wb.Pool{Namespace: u.GetNamespace(), Name: u.GetName()}
		if err := specInto(&u, &p); err != nil {
			problems = append(problems, err)
			continue
		}
		addrs, errs := wb.Addresses(p)
		problems = append(problems, errs...)
		for _, a := range addrs {
			key := p.Namespace + "/" + wb.NormalizedName(a.IP, a.NetworkName)
			if o, ok := overlap[key]; ok {
				seenOverlap[key] = true
				if o.PodRef != a.PodNamespace+"/"+a.PodName {
					problems = append(problems, fmt.Errorf("whereabouts OverlappingRangeIPReservation %s names pod %s, its IPPool %s names %s/%s: the pool's is imported", key, o.PodRef, a.Pool, a.PodNamespace, a.PodName))
				}
			}
			st, err := w.plan(ctx, a)
			if err != nil {
				return nil, nil, err
			}
			steps = append(steps, st)
		}
	}
	for key, o := range overlap {
		if !seenOverlap[key] {
			problems = append(problems, fmt.Errorf("whereabouts OverlappingRangeIPReservation %s (pod %s) has no allocation in any whereabouts IPPool: not imported", key, o.PodRef))
		}
	}
	sort.Slice(problems, func(i, j int) bool { return problems[i].Error() < problems[j].Error() })
	return steps, problems, nil
}

func listWhereabouts(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk)
	if err := c.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the API server does not serve whereabouts' %s (%s): is whereabouts installed? %w", strings.TrimSuffix(gvk.Kind, "List"), gvk.GroupVersion(), err)
		}
		return nil, fmt.Errorf("listing whereabouts %s: %w", strings.TrimSuffix(gvk.Kind, "List"), err)
	}
	return list.Items, nil
}

// specInto decodes an object's spec into v.
func specInto(u *unstructured.Unstructured, v any) error {
	b, err := json.Marshal(u.Object["spec"])
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return fmt.Errorf("whereabouts %s %s/%s: spec: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// readNADs returns the networks whose IPAM is whereabouts or, already
// switched, ipkeeper, parsed as the agent parses them.
func (w *importWorld) readNADs(ctx context.Context) ([]wb.Network, []error, error) {
	var list nadv1.NetworkAttachmentDefinitionList
	if err := w.c.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing NetworkAttachmentDefinitions: %w", err)
	}
	var out []wb.Network
	var problems []error
	for i := range list.Items {
		nad := &list.Items[i]
		key := nad.Namespace + "/" + nad.Name
		w.nads[key] = nad
		for _, typ := range []string{wb.PluginType, ipamconfig.PluginType} {
			conf, found, err := multus.PluginConfig(nad, typ)
			if err != nil || !found {
				continue
			}
			cfg, err := ipamconfig.Parse(conf)
			if err != nil {
				problems = append(problems, fmt.Errorf("NetworkAttachmentDefinition %s: %w", key, err))
				break
			}
			if cfg.Pool != "" {
				// Its addresses come from an ipkeeper IPPool, not from a
				// whereabouts range.
				break
			}
			out = append(out, wb.Network{NAD: key, Config: cfg})
			break
		}
	}
	return out, problems, nil
}

// plan decides what to do with one whereabouts allocation.
func (w *importWorld) plan(ctx context.Context, a wb.Address) (ImportStep, error) {
	st := ImportStep{WhereaboutsPool: a.Pool, IP: a.IP.String(), Pod: a.PodNamespace + "/" + a.PodName, Interface: a.IfName, ContainerID: a.ContainerID, ip: a.IP}
	skip := func(format string, args ...any) (ImportStep, error) {
		st.Action, st.Detail = importSkip, fmt.Sprintf(format, args...)
		return st, nil
	}
	var pod corev1.Pod
	switch err := w.c.Get(ctx, types.NamespacedName{Namespace: a.PodNamespace, Name: a.PodName}, &pod); {
	case apierrors.IsNotFound(err):
		return skip("pod gone; whereabouts' reconciler frees it, ipkeeper will not hold it")
	case err != nil:
		return st, fmt.Errorf("reading pod %s: %w", st.Pod, err)
	}
	net, why := w.networkOf(a, &pod)
	if net == nil {
		return skip("%s", why)
	}
	st.cfg, st.NAD, st.Network, st.Pool = net.Config, net.NAD, net.Config.Name, net.Config.PoolName()
	if p, ok := w.pools[st.Pool]; ok && p.Spec.NamespaceSelector != nil {
		var ns corev1.Namespace
		if err := w.c.Get(ctx, types.NamespacedName{Name: pod.Namespace}, &ns); err != nil {
			return st, fmt.Errorf("reading namespace %s for IPPool %s's spec.namespaceSelector: %w", pod.Namespace, p.Name, err)
		}
		if err := ipamconfig.PoolAdmits(p, pod.Namespace, ns.Labels); err != nil {
			st.Action, st.Detail = importConflict, err.Error()
			return st, nil
		}
	}
	st.prefix = netip.PrefixFrom(a.IP, a.Subnet.Bits())
	st.key = w.lockKey(net)
	st.Reservation = naming.Reservation(st.key, a.IP)
	st.node = pod.Spec.NodeName

	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	claim, why, err := w.claimOf(ctx, &pod, net, a.IfName)
	if err != nil {
		return st, err
	}
	if why != "" {
		return skip("%s", why)
	}
	if claim != nil {
		owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
		st.claim = claim
		if other := recordedOtherAddress(claim, a.IP); other != "" {
			st.Owner, st.Action = &owner, importConflict
			st.Detail = fmt.Sprintf("IPAMClaim %s/%s already records %s in this family", claim.Namespace, claim.Name, other)
			return st, nil
		}
	}
	st.Owner = &owner

	if cur, ok := w.reservations[st.Reservation]; ok {
		if reservation.HeldBy(cur, owner, a.IfName) {
			st.Action, st.Detail = importExists, "already imported"
			if claim != nil && !claimstatus.Records(claim, a.IP) {
				// The reservation is there, the claim's status is not yet:
				// the second half of an interrupted import.
				st.Action, st.Detail = importCreate, "reservation exists; the claim's status.ips is written"
			}
			return st, nil
		}
		st.Action = importConflict
		st.Detail = fmt.Sprintf("reserved in ipkeeper by %s", ownerString(cur.Spec.Owner))
		if cur.Spec.Released() {
			st.Detail += " (released, cooling down)"
		}
		return st, nil
	}
	if prev, ok := w.planned[st.Reservation]; ok && prev != st.Pod {
		st.Action, st.Detail = importConflict, "whereabouts also gives this address to "+prev+" (another whereabouts pool of the same ipkeeper network)"
		return st, nil
	}
	w.planned[st.Reservation] = st.Pod
	st.Action = importCreate
	return st, nil
}

// lockKey is what an inline network's reservations are named from: its
// IPPool's lock key, or, before ipkeeper-controller has made the pool from
// the NAD, the lock key of the pool it will make.
func (w *importWorld) lockKey(net *wb.Network) string {
	if p, ok := w.pools[net.Config.PoolName()]; ok {
		return p.LockKey()
	}
	ns, name, _ := strings.Cut(net.NAD, "/")
	return inlinepool.Build(net.Config, types.NamespacedName{Namespace: ns, Name: name}).LockKey()
}

// networkOf picks, among the networks using an address's whereabouts
// pool, the one the pod attaches: when they are all one ipkeeper pool any
// will do, else the one the pod's networks annotation names.
func (w *importWorld) networkOf(a wb.Address, pod *corev1.Pod) (*wb.Network, string) {
	cands := wb.Networks(a, w.nets)
	if len(cands) == 0 {
		return nil, fmt.Sprintf("no NetworkAttachmentDefinition with ipam.type whereabouts or ipkeeper has range %s and network_name %q", a.Subnet, a.NetworkName)
	}
	same := true
	for _, n := range cands[1:] {
		same = same && w.lockKey(&n) == w.lockKey(&cands[0])
	}
	if same {
		return &cands[0], ""
	}
	elems, _ := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
	var used []wb.Network
	for _, n := range cands {
		if slices.ContainsFunc(elems, func(e multus.Element) bool { ref := e.NAD(); return ref.String() == n.NAD }) {
			used = append(used, n)
		}
	}
	if len(used) == 1 {
		return &used[0], ""
	}
	names := make([]string, len(cands))
	for i, n := range cands {
		names[i] = n.NAD + " (network " + n.Config.Name + ")"
	}
	return nil, "whereabouts pool shared by NADs of different networks (" + strings.Join(names, ", ") + ") and the pod's networks annotation does not tell which one this is"
}

// claimOf returns the IPAMClaim an attachment keeps its address through
// after the switch: for a virt-launcher pod's interface on a network whose
// NAD allows persistent IPs, the claim ipkeeper-controller makes for the
// VM's network (naming.Claim, the controller's name). why says why the
// attachment cannot be imported yet (the claim is not there); claim is nil
// with no reason for an ordinary (pod-owned) attachment.
func (w *importWorld) claimOf(ctx context.Context, pod *corev1.Pod, net *wb.Network, ifName string) (claim *ipamclaimsv1alpha1.IPAMClaim, why string, err error) {
	vmiName, ok := kubevirt.IsLauncherPod(pod)
	if !ok {
		return nil, "", nil
	}
	nad := w.nads[net.NAD]
	if nad == nil {
		return nil, "", nil
	}
	nw, err := multus.ParseNAD(nad)
	if err != nil || !nw.AllowPersistentIPs {
		return nil, "", nil //nolint:nilerr // a NAD without persistent IPs keeps pod-owned addresses
	}
	var vmi kubevirtv1.VirtualMachineInstance
	err = w.c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: vmiName}, &vmi)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return nil, fmt.Sprintf("virt-launcher pod of VMI %s, which is gone", vmiName), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", pod.Namespace, vmiName, err)
	}
	var logical string
	for _, n := range kubevirt.SecondaryNetworks(&vmi.Spec) {
		if kubevirt.PodInterfaceName(n.Name) == ifName || kubevirt.OrdinalInterfaceName(n.Ordinal) == ifName {
			logical = n.Name
			break
		}
	}
	if logical == "" {
		return nil, fmt.Sprintf("interface %s is none of VMI %s's secondary networks", ifName, vmiName), nil
	}
	owner := vmi.Name
	if vm := claimowner.VMOf(&vmi); vm != nil {
		owner = vm.Name
	}
	name := naming.Claim(owner, logical)
	key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
	claim = w.claims[key]
	if claim == nil {
		claim = &ipamclaimsv1alpha1.IPAMClaim{}
		err = w.c.Get(ctx, key, claim)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("IPAMClaim %s/%s not found: ipkeeper-controller makes it for VM network %q once the KubeVirt PersistentIPs feature gate is on; run the import again then", pod.Namespace, name, logical), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading IPAMClaim %s/%s: %w", pod.Namespace, name, err)
	}
	w.claims[key] = claim
	if claim.Spec.Network != net.Config.Name {
		return nil, fmt.Sprintf("IPAMClaim %s/%s is for network %q, the NAD's is %q", claim.Namespace, claim.Name, claim.Spec.Network, net.Config.Name), nil
	}
	return claim, "", nil
}

// recordedOtherAddress returns an address of ip's family other than ip
// that the claim's status records, "" when none.
func recordedOtherAddress(claim *ipamclaimsv1alpha1.IPAMClaim, ip netip.Addr) string {
	for _, other := range claimstatus.Addresses(claim) {
		if other.Is4() == ip.Is4() && other != ip {
			return other.String()
		}
	}
	return ""
}

// applyImportStep creates the step's reservation as the agent makes it
// (a pod's: interface, container ID, node), and for a claim then records
// the address in its status as the agent does after allocating.
func applyImportStep(ctx context.Context, c client.Client, st *ImportStep) error {
	p := reservation.Params{Pool: st.Pool, Key: st.key, Network: st.Network, IP: st.ip, Owner: *st.Owner, Interface: st.Interface}
	if st.claim != nil {
		p.Interface = st.claim.Spec.Interface
	} else {
		p.ContainerID, p.Node = st.ContainerID, st.node
	}
	res := reservation.New(p)
	if res.Name != st.Reservation {
		return fmt.Errorf("the reservation of %s is named %s, but the plan names it %s", st.IP, res.Name, st.Reservation)
	}
	_, _, err := reservation.CreateOrAdopt(ctx, reservation.KubeStore{Client: c}, res)
	// Made since the plan was read: the holder's own (an import run again
	// after it stopped half-way) is adopted, someone else's is a conflict.
	var taken *reservation.TakenError
	switch {
	case errors.As(err, &taken) && taken.Holder == nil:
		return fmt.Errorf("reading IPReservation %s of %s, made while importing: %w", st.Reservation, st.IP, taken.Err)
	case errors.As(err, &taken):
		st.Action, st.Detail = importConflict, "reserved in ipkeeper meanwhile"
		return nil
	case err != nil:
		return fmt.Errorf("creating IPReservation %s for %s: %w", st.Reservation, st.IP, err)
	}
	if st.claim == nil || claimstatus.Records(st.claim, st.ip) {
		return nil
	}
	claim := st.claim.DeepCopy()
	claimstatus.Record(&claim.Status, st.prefix)
	claim.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: strings.SplitN(st.Pod, "/", 2)[1]}
	meta.SetStatusCondition(&claim.Status.Conditions, claimstatus.Allocated(&claim.Status, claim.Spec.Network, "imported from whereabouts", claim.Generation))
	if err := claimstatus.Write(ctx, c, claim); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("IPAMClaim %s/%s changed while importing; run the import again: %w", claim.Namespace, claim.Name, err)
		}
		return fmt.Errorf("writing status.ips of IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	*st.claim = *claim
	return nil
}
