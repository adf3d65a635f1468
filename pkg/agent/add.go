package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/pkg/allocator"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
	"github.com/ipkeeper/ipkeeper/pkg/ipamconfig"
	"github.com/ipkeeper/ipkeeper/pkg/reservation"
)

// maxConflicts bounds how many taken candidates one ADD tries per range
// before giving up; each conflict means another agent won that address, so
// hitting the bound means the index is badly out of date.
const maxConflicts = 64

// request is a parsed CNI request.
type request struct {
	*cniproto.Request
	cfg  *ipamconfig.Config
	args *cniproto.CNIArgs
	// attach is what the pod says about the attachment (claim, NAD).
	attach attachment
}

func parseRequest(req *cniproto.Request) (*request, error) {
	cfg, err := ipamconfig.Parse(req.Config)
	if err != nil {
		return nil, cniError(codeInvalidConfig, err)
	}
	args, err := req.CNIArgs()
	if err != nil {
		return nil, cniError(codeInvalidEnv, err)
	}
	return &request{Request: req, cfg: cfg, args: args}, nil
}

// Add reserves one address per configured range (IP family) for a pod
// attachment and returns them as a CNI result. It is idempotent for
// (pod UID, interface, network).
func (a *Agent) Add(ctx context.Context, creq *cniproto.Request) (_ *types100.Result, err error) {
	defer a.metrics.observe(cniproto.CmdAdd, time.Now(), &err)
	req, err := parseRequest(creq)
	if err != nil {
		a.metrics.failures.WithLabelValues("invalid").Inc()
		return nil, err
	}
	if err := req.args.RequirePod(); err != nil {
		return nil, a.fail("invalid", codeInvalidEnv, err)
	}
	pod, err := a.pods.get(ctx, req.args)
	if err != nil {
		return nil, a.fail("pod", codeOf(err, codeTryAgainLater), err)
	}
	att, err := a.attachmentOf(ctx, pod, req)
	if err == nil && !att.found && pod.Annotations[nadv1.NetworkAttachmentAnnot] != "" {
		// The cached pod may predate a networks annotation update.
		if pod, err = a.pods.getLive(ctx, req.args); err == nil {
			att, err = a.attachmentOf(ctx, pod, req)
		}
	}
	if err != nil {
		return nil, a.fail("invalid", codeOf(err, codeInvalidConfig), err)
	}
	req.attach = att
	claimName := att.claim
	var ips []netip.Prefix
	if claimName != "" {
		ips, err = a.allocateForClaim(ctx, req, pod, claimName)
	} else {
		unlock := a.locks.lock(string(pod.UID) + "/" + req.IfName)
		ips, err = a.allocateForPod(ctx, req, pod)
		unlock()
	}
	if err != nil {
		a.log.Warn("ADD failed", "pod", pod.Namespace+"/"+pod.Name, "interface", req.IfName, "network", req.cfg.Name, "error", err)
		return nil, err
	}
	a.log.Info("ADD", "pod", pod.Namespace+"/"+pod.Name, "interface", req.IfName, "network", req.cfg.Name, "ips", formatIPs(ips))
	return buildResult(req.cfg, ips), nil
}

// allocateForPod returns the attachment's addresses, one per range, reusing
// those it already holds.
func (a *Agent) allocateForPod(ctx context.Context, req *request, pod *corev1.Pod) ([]netip.Prefix, error) {
	network := req.cfg.Name
	held := a.idx.attachment(network, pod.UID, req.IfName)
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}

	var (
		out     []netip.Prefix
		created []entry // rolled back if a later range fails
	)
	rollback := func() {
		for _, e := range created {
			if err := a.store.Delete(context.WithoutCancel(ctx), e.name, e.uid); err != nil {
				a.log.Error("rolling back reservation after a failed ADD", "reservation", e.name, "error", err)
				continue
			}
			a.idx.remove(e.name, e.uid)
			a.metrics.releases.WithLabelValues("rollback").Inc()
		}
	}
	for _, r := range req.cfg.Ranges {
		if e, ok := heldIn(held, r); ok {
			if err := a.adoptSandbox(ctx, e, req); err != nil {
				rollback()
				return nil, err
			}
			out = append(out, netip.PrefixFrom(e.ip, r.Subnet.Bits()))
			continue
		}
		e, err := a.reserveInRange(ctx, req, r, owner)
		if err != nil {
			rollback()
			return nil, err
		}
		created = append(created, e)
		out = append(out, netip.PrefixFrom(e.ip, r.Subnet.Bits()))
	}
	return out, nil
}

func heldIn(held []entry, r ipamconfig.Range) (entry, bool) {
	for _, e := range held {
		if r.Subnet.Contains(e.ip) {
			return e, true
		}
	}
	return entry{}, false
}

// adoptSandbox points an existing reservation at the request's sandbox, so
// a DEL for an older sandbox of the same pod does not release it. A retried
// ADD for the same sandbox writes nothing.
func (a *Agent) adoptSandbox(ctx context.Context, e entry, req *request) error {
	if e.containerID == req.ContainerID && e.node == a.opts.NodeName {
		return nil
	}
	r, err := a.store.Get(ctx, e.name)
	if err != nil {
		return cniError(codeTryAgainLater, err)
	}
	if r.UID != e.uid {
		return cniError(codeTryAgainLater, fmt.Errorf("reservation %s changed while in use; retry", e.name))
	}
	r.Spec.ContainerID, r.Spec.Node = req.ContainerID, a.opts.NodeName
	if err := a.store.Update(ctx, r); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	if ne, ok := entryOf(r); ok {
		a.idx.upsert(ne)
	}
	return nil
}

// reserveInRange reserves the static address requested for r's family, or
// a free candidate of r.
func (a *Agent) reserveInRange(ctx context.Context, req *request, r ipamconfig.Range, owner ipkeeperv1alpha1.ReservationOwner) (entry, error) {
	network := req.cfg.Name
	if static, ok := staticFor(req.cfg, r); ok {
		if err := allocator.Usable(r, static); err != nil {
			return entry{}, a.fail("invalid", codeInvalidConfig, fmt.Errorf("static IP %s requested for network %q: %w", static, network, err))
		}
		e, err := a.create(ctx, req, static, owner)
		if errors.Is(err, ErrTaken) {
			return entry{}, a.fail("conflict", codeInternal, a.describeHolder(ctx, "static IP", network, static))
		}
		return e, err
	}

	seed := string(owner.UID) + "/" + req.IfName
	taken := a.idx.takenFunc(network, time.Now())
	verified := false
	for attempt := 0; attempt < maxConflicts; attempt++ {
		ip, err := allocator.Candidate(r, taken, seed)
		if errors.Is(err, allocator.ErrExhausted) && !verified {
			// The index errs towards "taken" (an informer event for a
			// reservation already released may arrive late), so confirm
			// exhaustion against a live list before refusing the pod.
			if taken, err = a.liveTaken(ctx, network); err != nil {
				return entry{}, cniError(codeTryAgainLater, err)
			}
			verified = true
			attempt--
			continue
		}
		if errors.Is(err, allocator.ErrExhausted) {
			return entry{}, a.fail("exhausted", codeInternal, fmt.Errorf("network %q is exhausted: %w", network, err))
		}
		if err != nil {
			return entry{}, a.fail("internal", codeInternal, fmt.Errorf("network %q: %w", network, err))
		}
		e, err := a.create(ctx, req, ip, owner)
		if errors.Is(err, ErrTaken) {
			a.metrics.conflicts.Inc()
			a.idx.markConflict(network, ip, time.Now())
			continue
		}
		return e, err
	}
	return entry{}, a.fail("conflict", codeTryAgainLater, fmt.Errorf("network %q: %d candidate addresses in %s were taken by others at create time; the agent's cache is lagging, retry", network, maxConflicts, r))
}

// liveTaken returns a taken predicate built from a live list of the
// network's reservations plus the conflicts seen since.
func (a *Agent) liveTaken(ctx context.Context, network string) (func(netip.Addr) bool, error) {
	since := time.Now()
	live, err := a.store.TakenIn(ctx, network)
	if err != nil {
		return nil, err
	}
	return func(ip netip.Addr) bool { return live[ip] || a.idx.conflictSince(network, ip, since) }, nil
}

// create writes the reservation of ip for the attachment.
func (a *Agent) create(ctx context.Context, req *request, ip netip.Addr, owner ipkeeperv1alpha1.ReservationOwner) (entry, error) {
	network := req.cfg.Name
	obj := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name: reservation.Name(network, ip),
			Labels: map[string]string{
				reservation.NetworkLabel:   reservation.NetworkLabelValue(network),
				reservation.OwnerKindLabel: string(owner.Kind),
			},
		},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Network: network, IP: ip.String(), Owner: owner,
			InterfaceName: req.IfName, ContainerID: req.ContainerID, Node: a.opts.NodeName,
		},
	}
	if err := a.store.Create(ctx, obj); err != nil {
		if errors.Is(err, ErrTaken) && owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
			// The other pod of a live migration may have reserved it for
			// the same claim a moment ago: that is ours too.
			if held, gerr := a.store.Get(ctx, obj.Name); gerr == nil && held.Spec.Owner.UID == owner.UID {
				e, _ := entryOf(held)
				a.idx.upsert(e)
				return e, nil
			}
		}
		if errors.Is(err, ErrTaken) {
			return entry{}, err
		}
		return entry{}, a.fail("internal", codeTryAgainLater, err)
	}
	e, _ := entryOf(obj)
	a.idx.upsert(e)
	a.metrics.allocations.Inc()
	return e, nil
}

// describeHolder explains who holds an address that was asked for by
// name: what says how ("static IP", or "address" for a claim's).
func (a *Agent) describeHolder(ctx context.Context, what, network string, ip netip.Addr) error {
	name := reservation.Name(network, ip)
	r, err := a.store.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("%s %s on network %q is already reserved (reservation %s)", what, ip, network, name)
	}
	o := r.Spec.Owner
	return fmt.Errorf("%s %s on network %q is already reserved by %s %s/%s (reservation %s)", what, ip, network, o.Kind, o.Namespace, o.Name, name)
}

func staticFor(cfg *ipamconfig.Config, r ipamconfig.Range) (netip.Addr, bool) {
	for _, p := range cfg.StaticIPs {
		if r.Subnet.Contains(p.Addr()) {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// buildResult renders the CNI 1.1.0 result the shim converts to the
// network's cniVersion. IPAM results carry no interfaces: the main plugin
// (bridge, macvlan ...) assigns them.
func buildResult(cfg *ipamconfig.Config, ips []netip.Prefix) *types100.Result {
	res := &types100.Result{CNIVersion: types100.ImplementedSpecVersion, DNS: cfg.DNS}
	for _, p := range ips {
		ipc := &types100.IPConfig{Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if r, ok := cfg.RangeFor(p.Addr()); ok && r.Gateway.IsValid() {
			ipc.Gateway = r.Gateway.AsSlice()
		}
		res.IPs = append(res.IPs, ipc)
	}
	for _, r := range cfg.Routes {
		rc := *r
		res.Routes = append(res.Routes, &rc)
	}
	return res
}

// formatIPs renders addresses for logs and errors.
func formatIPs(ips []netip.Prefix) string {
	s := make([]string, len(ips))
	for i, p := range ips {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
