// SPDX-License-Identifier: Apache-2.0

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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// request is a parsed CNI request.
type request struct {
	*cniproto.Request
	cfg  *ipamconfig.Config
	args *cniproto.CNIArgs
	// attach is what the pod says about the attachment (claim, NAD).
	attach attachment
	// pool is the network's pool, read for ADD and CHECK.
	pool *ipam.Pool
	// mac is the MAC the attachment presents on a sticky_mac network
	// (CNI_ARGS MAC, else runtimeConfig.mac); nil elsewhere.
	mac net.HardwareAddr
	// macSeen is when the latest attachment of mac the agent listed was
	// made (latestAttached); zero without a MAC or before the list.
	macSeen time.Time
}

func parseRequest(req *cniproto.Request) (*request, error) {
	cfg, err := configs.parse(req.Config)
	if err != nil {
		return nil, fail(reasonInvalid, codeInvalidConfig, err)
	}
	args, err := req.CNIArgs()
	if err != nil {
		return nil, fail(reasonInvalid, codeInvalidEnv, err)
	}
	r := &request{Request: req, cfg: cfg, args: args}
	if cfg.StickyMAC {
		if r.mac, err = ipamconfig.ParseMAC("CNI_ARGS "+cniproto.ArgMAC, args.MAC); err != nil {
			return nil, fail(reasonInvalid, codeInvalidEnv, err)
		}
		if r.mac == nil {
			r.mac = cfg.RuntimeMAC
		}
	}
	return r, nil
}

// Add reserves one address per configured range (IP family) for a pod
// attachment and returns them as a CNI result. It is idempotent for
// (pod UID, interface, network).
func (a *Agent) Add(ctx context.Context, creq *cniproto.Request) (_ *types100.Result, err error) {
	defer a.metrics.observe(cniproto.CmdAdd, time.Now(), &err)
	defer func() {
		if err != nil {
			a.metrics.failures.WithLabelValues(string(reasonOf(err))).Inc()
		}
	}()
	req, err := parseRequest(creq)
	if err != nil {
		return nil, err
	}
	a.noteIgnoredKeys(req.cfg)
	pod, err := a.resolvePod(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.pool, err = a.resolvePool(ctx, req); err == nil {
		err = a.admitsNew(ctx, req, pod.UID)
	}
	if err != nil {
		a.log.Error(err, "ADD failed", "pod", pod.Namespace+"/"+pod.Name, "interface", req.IfName, "network", req.cfg.Name)
		return nil, err
	}
	var ips []netip.Prefix
	if req.attach.claim != "" {
		ips, err = a.claimAddresses(ctx, req, pod, req.attach.claim, true)
	} else {
		ips, err = a.allocateForPod(ctx, req, pod)
	}
	if err != nil {
		a.log.Error(err, "ADD failed", "pod", pod.Namespace+"/"+pod.Name, "interface", req.IfName, "network", req.cfg.Name)
		return nil, err
	}
	a.log.Info("ADD", "pod", pod.Namespace+"/"+pod.Name, "interface", req.IfName, "network", req.cfg.Name, "ips", formatIPs(ips))
	return buildResult(req, ips), nil
}

// resolvePod returns the pod a request is for (bound to this node, with
// the runtime's UID) and records in req.attach what the pod says about the
// attachment: the IPAMClaim it references ("" for an ephemeral one) and
// through which NAD.
func (a *Agent) resolvePod(ctx context.Context, req *request) (*corev1.Pod, error) {
	if err := req.args.RequirePod(); err != nil {
		return nil, fail(reasonInvalid, codeInvalidEnv, err)
	}
	pod, err := a.pods.get(ctx, req.args)
	if err != nil {
		return nil, fail(reasonPod, codeOf(err, codeTryAgainLater), err)
	}
	att, err := a.attachmentOf(ctx, pod, req)
	if err == nil && !att.found && pod.Annotations[multus.Annotation] != "" {
		// The cached pod may predate a networks annotation update.
		if pod, err = a.pods.getLive(ctx, req.args); err != nil {
			return nil, fail(reasonPod, codeOf(err, codeTryAgainLater), err)
		}
		att, err = a.attachmentOf(ctx, pod, req)
	}
	if code := codeOf(err, codeInvalidConfig); code == codeTryAgainLater {
		return nil, fail(reasonInternal, code, err)
	} else if err != nil {
		return nil, fail(reasonInvalid, code, err)
	}
	req.attach = att
	return pod, nil
}

// allocateForPod returns the attachment's addresses, one per range, reusing
// those it already holds (pointed at the request's sandbox).
func (a *Agent) allocateForPod(ctx context.Context, req *request, pod *corev1.Pod) ([]netip.Prefix, error) {
	h := holder{
		owner:  ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		ifName: req.IfName,
	}
	defer a.locks.lock(h.key(req.pool.Name))()
	ips, err := a.reserve(ctx, req, h, func(ctx context.Context, e entry) (entry, error) { return a.takeOver(ctx, e, req, true) })
	return ips, err
}

// takeOver points an existing reservation at this node and, with sandbox,
// at the request's sandbox, so a DEL for an older sandbox of the same pod
// does not release it. Nothing is written when it points there already.
func (a *Agent) takeOver(ctx context.Context, e entry, req *request, sandbox bool) (entry, error) {
	if e.Node == a.opts.NodeName && (!sandbox || e.ContainerID == req.ContainerID) {
		return e, nil
	}
	r, err := a.store.Get(ctx, e.Name)
	if err != nil {
		return entry{}, fail(reasonInternal, codeTryAgainLater, err)
	}
	if r.UID != e.UID {
		return entry{}, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("reservation %s changed while in use; retry", e.Name))
	}
	if r.Spec.Released() {
		// Released since the cache was read (a DEL of this attachment):
		// it cools down for nobody; the retry allocates anew.
		a.recordLive(r)
		return entry{}, fail(reasonInternal, codeTryAgainLater, fmt.Errorf("reservation %s was released while this ADD ran; retry", e.Name))
	}
	r.Spec.Node = a.opts.NodeName
	if sandbox {
		r.Spec.ContainerID = req.ContainerID
		r.Spec.AttachedAt = ptr.To(metav1.Now())
	}
	if err := a.store.Update(ctx, r); err != nil {
		if sandbox && !errors.Is(err, ErrChanged) {
			// Its answer lost, the update may have landed: then the
			// reservation is this sandbox's, and the DEL the runtime sends
			// for the failed ADD must find it (it reads it live).
			h := holder{owner: e.Owner, ifName: e.InterfaceName}
			a.uncertain.add(h.key(e.Pool), e.Name, sandboxKey{e.Pool, req.ContainerID, req.IfName})
		}
		return entry{}, fail(reasonInternal, codeTryAgainLater, err)
	}
	ne, _ := index.EntryOf(r)
	a.reservations.Wrote(ne)
	return ne, nil
}

// buildResult renders the CNI 1.1.0 result the shim converts to the
// network's cniVersion. IPAM results carry no interfaces: the main plugin
// (bridge, macvlan ...) assigns them.
func buildResult(req *request, ips []netip.Prefix) *types100.Result {
	cfg := req.cfg
	res := &types100.Result{CNIVersion: types100.ImplementedSpecVersion, DNS: cfg.DNS}
	for _, p := range ips {
		ipc := &types100.IPConfig{Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if r, ok := req.pool.Containing(p.Addr()); ok && r.Gateway().IsValid() {
			ipc.Gateway = r.Gateway().AsSlice()
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
