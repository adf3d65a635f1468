package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
)

// Check verifies the attachment still holds one reservation per configured
// range, made for this sandbox.
func (a *Agent) Check(ctx context.Context, creq *cniproto.Request) (err error) {
	defer a.metrics.observe(cniproto.CmdCheck, time.Now(), &err)
	req, err := parseRequest(creq)
	if err != nil {
		return err
	}
	if err := req.args.RequirePod(); err != nil {
		return cniError(codeInvalidEnv, err)
	}
	pod, err := a.pods.get(ctx, req.args)
	if err != nil {
		return cniError(codeTryAgainLater, err)
	}
	held := a.idx.attachment(req.cfg.Name, pod.UID, req.IfName)
	for _, r := range req.cfg.Ranges {
		e, ok := heldIn(held, r)
		if !ok {
			return cniError(codeInternal, fmt.Errorf("pod %s/%s interface %s holds no address in %s of network %q", pod.Namespace, pod.Name, req.IfName, r, req.cfg.Name))
		}
		if e.containerID != req.ContainerID {
			return cniError(codeInternal, fmt.Errorf("reservation %s of pod %s/%s belongs to sandbox %s, not %s", e.name, pod.Namespace, pod.Name, e.containerID, req.ContainerID))
		}
	}
	return nil
}

// Status reports whether the agent can serve: caches synced.
func (a *Agent) Status(_ context.Context) error {
	if !a.ready.Load() {
		return fmt.Errorf("ipkeeper-agent on node %s is starting: caches not synced yet", a.opts.NodeName)
	}
	return nil
}
