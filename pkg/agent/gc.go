package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
)

// gcConfig is the part of a CNI 1.1 GC request this agent reads.
type gcConfig struct {
	ValidAttachments []struct {
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifname"`
	} `json:"cni.dev/valid-attachments"`
}

// GC releases this node's ephemeral reservations on the request's network
// whose attachment (container ID, interface) is not in the runtime's list
// of valid attachments. Claim-owned reservations and other nodes' are never
// touched, nor attachments with an ADD in flight here.
func (a *Agent) GC(ctx context.Context, creq *cniproto.Request) (err error) {
	defer a.metrics.observe(cniproto.CmdGC, time.Now(), &err)
	network, err := networkName(creq.Config)
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
	doomed := a.idx.filter(func(e entry) bool {
		return e.network == network && e.node == a.opts.NodeName &&
			e.owner.Kind == ipkeeperv1alpha1.OwnerPod && !valid[[2]string{e.containerID, e.ifName}] &&
			!a.locks.held(string(e.owner.UID)+"/"+e.ifName)
	})
	return a.release(ctx, doomed, "GC")
}
