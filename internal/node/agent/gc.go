// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// gcConfig is the part of a CNI 1.1 GC request this agent reads.
type gcConfig struct {
	ValidAttachments []struct {
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifname"`
	} `json:"cni.dev/valid-attachments"`
}

// GC releases this node's ephemeral reservations of the request's network
// whose attachment (container ID, interface) is not in the runtime's list
// of valid attachments. Claim-owned reservations and other nodes' are never
// touched; each is released under its attachment's lock, at the version
// judged stale: an ADD in flight (a new sandbox taking it over) wins, and
// so does one that finished shortly before (the runtime's list may predate
// it).
func (a *Agent) GC(ctx context.Context, creq *cniproto.Request) (err error) {
	defer a.metrics.observe(cniproto.CmdGC, time.Now(), &err)
	pool, network, err := networkOf(creq.Config)
	if err != nil {
		return cniError(codeInvalidConfig, err)
	}
	var gc gcConfig
	if err := json.Unmarshal(creq.Config, &gc); err != nil {
		return cniError(codeInvalidConfig, fmt.Errorf("cni.dev/valid-attachments: %w", err))
	}
	valid := make(map[[2]string]bool, len(gc.ValidAttachments))
	for _, v := range gc.ValidAttachments {
		valid[[2]string{v.ContainerID, v.IfName}] = true
	}
	// The runtime lists the valid attachments of this network only:
	// another network drawing from the same pool is not its to judge.
	stale := func(r *ipkeeperv1alpha1.IPReservation) bool {
		return r.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerPod && r.Spec.Node == a.opts.NodeName && r.Spec.Network == network &&
			!valid[[2]string{r.Spec.ContainerID, r.Spec.InterfaceName}]
	}
	start := time.Now()
	var errs []error
	for _, e := range a.reservations.OnNode(a.opts.NodeName, pool) {
		if a.opts.CNIGCMinAge > 0 && !e.Attached.Before(start.Add(-a.opts.CNIGCMinAge)) {
			// Attached since the runtime may have built its list: an ADD
			// that finished just before this GC. The time is the object's,
			// so an agent restarted in between judges alike.
			continue
		}
		if stale(index.ReservationOf(e)) {
			errs = append(errs, a.releaseAttachment(ctx, e, "GC", stale, true))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	return nil
}
