// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// Check verifies the attachment still holds one reservation per configured
// range: made for this sandbox for a pod attachment; for a claim-backed
// one, the claim's recorded address, reserved for the claim.
func (a *Agent) Check(ctx context.Context, creq *cniproto.Request) (err error) {
	defer a.metrics.observe(cniproto.CmdCheck, time.Now(), &err)
	req, err := parseRequest(creq)
	if err != nil {
		return err
	}
	pod, err := a.resolvePod(ctx, req)
	if err != nil {
		return err
	}
	if req.pool, err = a.resolvePool(ctx, req); err != nil {
		return err
	}
	if req.attach.claim != "" {
		return a.checkClaim(ctx, req, pod, req.attach.claim)
	}
	held := a.reservations.Attachment(req.pool.Name, pod.UID, req.IfName)
	for _, family := range req.pool.Families() {
		e, ok := heldIn(held, family[0].Is4())
		if !ok {
			return cniError(codeInternal, fmt.Errorf("pod %s/%s interface %s holds no address (%s) of network %q", pod.Namespace, pod.Name, req.IfName, familyName(family[0].Is4()), req.cfg.Name))
		}
		if e.ContainerID != req.ContainerID {
			return cniError(codeInternal, fmt.Errorf("reservation %s of pod %s/%s belongs to sandbox %s, not %s", e.Name, pod.Namespace, pod.Name, e.ContainerID, req.ContainerID))
		}
	}
	return nil
}

// checkClaim verifies, as an ADD does (reading only, not waiting), that
// the pod may use the claim and that the claim records an address of
// every family of the pool, each reserved for the claim.
func (a *Agent) checkClaim(ctx context.Context, req *request, pod *corev1.Pod, claimName string) error {
	ips, err := a.claimAddresses(ctx, req, pod, claimName, false)
	if err != nil {
		return cniError(codeInternal, err)
	}
	for _, family := range req.pool.Families() {
		if !slices.ContainsFunc(ips, func(p netip.Prefix) bool { return p.Addr().Is4() == family[0].Is4() }) {
			return cniError(codeInternal, fmt.Errorf("IPAMClaim %s/%s of pod %s/%s interface %s records no address (%s) of network %q", pod.Namespace, claimName, pod.Namespace, pod.Name, req.IfName, familyName(family[0].Is4()), req.cfg.Name))
		}
	}
	return nil
}

// Status reports whether the agent can serve, and if not, why.
func (a *Agent) Status(_ context.Context) error { return a.notReady() }

func familyName(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}
