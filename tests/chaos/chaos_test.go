// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
)

// Defaults of the short run `make test` does; CHAOS_SEED and
// CHAOS_DURATION (make chaos SEED=... DURATION=...) override them.
const (
	defaultSeed     = 1
	defaultDuration = 60 * time.Second
	workers         = 12
	// The short run must reach these, and see VMs' live NAD swaps within
	// blue's shared pool (it runs on for one done and one failed and
	// swapped back, and fails with neither), or it proves little; on a
	// slow machine (or after a long API server restart) it runs up to
	// maxShortExtension longer to get there.
	minShortOps       = 1500
	maxShortExtension = 60 * time.Second
	// settleTimeout bounds the wait at quiescence for the garbage
	// collector (its grace period, then retries after the run's faults)
	// and for every claim to settle: a claim whose recorded address was
	// someone else's is retried on the controller's backoff, at most two
	// minutes apart. A run that settles at once does not wait.
	settleTimeout = 2*time.Minute + 15*time.Second
)

func TestChaos(t *testing.T) {
	seed, duration, short := settings(t)
	race := os.Getenv("CHAOS_RACE") != ""
	t.Logf("chaos: seed %d, %s of operations and faults (replay: make chaos SEED=%d DURATION=%s)", seed, duration, seed, duration)
	ctx := context.Background()
	// The verdict is printed last, after any log output, so that the tail
	// of a CI log always says why the run failed.
	out := &outcome{t: t}
	defer out.printVerdict()

	setup := time.Now()
	c, err := startCluster(ctx, seed, race)
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Logf("chaos: control plane, controller and %d agents up in %s", numNodes, time.Since(setup).Round(time.Second))
	defer func() {
		if t.Failed() {
			var b strings.Builder
			c.cp.DumpLogs(&b, 200)
			path := filepath.Join(c.dir, "control-plane-tail.log")
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Logf("writing %s: %v", path, err)
			}
			t.Logf("process logs (agents, controller, control plane) kept in %s", c.dir)
			c.stop()
			return
		}
		c.stop()
		_ = os.RemoveAll(c.dir)
	}()

	v := &violations{hist: newHistory(4000)}
	r := newRunner(c, v)
	for _, cs := range r.claims {
		claim, err := r.createClaim(ctx, 0, cs.name, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		cs.uid = claim.UID
	}

	// Operations and faults for the duration, checked continuously.
	start := time.Now()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	checkCtx, stopChecks := context.WithCancel(ctx)
	checksDone := make(chan struct{})
	go func() {
		defer close(checksDone)
		r.checkContinuously(checkCtx, time.Second)
	}()
	vmCtx, stopVMs := context.WithCancel(ctx)
	defer stopVMs()
	vms, err := r.startVMs(vmCtx, seed+3)
	if err != nil {
		t.Fatalf("starting the VMs: %v", err)
	}
	// Long runs only (see makerops.go): with virt-controller started
	// again, VM operations go on all through a long run.
	r.longVMs = !short
	makerDone := make(chan struct{})
	go func() {
		defer close(makerDone)
		if !short {
			r.runMaker(vmCtx, seed+4)
		}
	}()
	c.proxy.setEnabled(true)
	inj := &injector{r: r, c: c, sched: newFaultScheduler(seed + 1)}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		inj.run(runCtx)
	}()
	steps := make(chan step)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for st := range steps {
				r.run(ctx, st)
			}
		}()
	}
	sched := newScheduler(seed)
	for dispatched := 0; ; dispatched++ {
		ran := time.Since(start)
		if ran >= duration && (!short || (dispatched >= minShortOps && r.swapped() && len(r.sharedPoolSwapsMissing()) == 0) || ran >= duration+maxShortExtension) {
			break // the short run goes on (up to a limit) until it has done enough to mean something
		}
		steps <- sched.next()
	}
	stopRun()
	dispatched := time.Since(start)
	close(steps)
	wg.Wait()
	stopVMs()
	vms.Wait()
	<-makerDone
	drained := time.Since(start)
	<-faultsDone
	inj.wg.Wait()
	c.proxy.setEnabled(false)
	ran := time.Since(start)
	t.Logf("chaos: operations dispatched for %s, the last ones done %s later, restarts in progress %s after that",
		dispatched.Round(time.Second), (drained - dispatched).Round(time.Second), (ran - drained).Round(time.Second))

	// Quiescence: every process up, every owed DEL done, the GC grace
	// period over; then everything is checked once more.
	if err := r.quiesce(ctx); err != nil {
		out.errorf("reaching quiescence: %v", err)
	}
	stopChecks()
	<-checksDone
	quiet := time.Now()
	r.waitSettled(ctx, settleTimeout)
	r.checkOnce(ctx, true)
	r.waitPoolsSettled(ctx, time.Minute)
	if ls, err := r.readLive(ctx); err != nil {
		r.harnessError(fmt.Errorf("reading the cluster for I14: %w", err))
	} else {
		r.checkPoolUsage(ls)
		r.checkQuotaUsage(ls)
	}
	t.Logf("chaos: quiescence and final checks took %s", time.Since(quiet).Round(time.Second))
	for _, p := range c.panics() {
		r.violate("I5", "panic-or-race", "in a process log: "+p)
	}

	t.Log(r.summary(seed, ran))
	r.nodeBlocksLeft.Range(func(node, left any) bool {
		t.Logf("blocks of deleted node %s still there when it was made again (not a violation; see nodeops.go): %s", node, left)
		return true
	})
	r.vmErrs.Range(func(op, err any) bool {
		t.Logf("last error of a failed VM %s (a fault of the run, or a claim not filled in time; the VM starts over): %s", op, err)
		return true
	})
	if len(r.unused) > 0 {
		t.Logf("reservations of live pods held by none of their live attachments (not a violation; the next sandbox adopts them):\n  %s", strings.Join(r.unused, "\n  "))
	}
	if len(r.allowed) > 0 {
		t.Logf("claims in an allowed state at quiescence (not a violation: someone else holds an address they ask for or were moved to):\n  %s", strings.Join(r.allowed, "\n  "))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, err := range v.harness {
		out.errorf("harness: %v", err)
	}
	for _, viol := range v.list {
		if viol.history == "" {
			continue // beyond maxDetailed of its class: counted in the summary
		}
		out.errorf("VIOLATION %s (seed %d, at %s): %s\nobjects:\n%shistory (the last events, and earlier ones naming the objects):\n%s",
			viol.class, seed, viol.at.Format("15:04:05.000"), viol.msg, viol.objects, viol.history)
	}
	if len(v.list) > 0 {
		out.errorf("%d invariant violations; replay with: make chaos SEED=%d DURATION=%s", len(v.list), seed, duration)
	}
	if short {
		r.assertCoverage(out)
	} else {
		r.assertLongCoverage(out)
	}
}

// outcome records each failure's first line for the closing verdict.
type outcome struct {
	t     *testing.T
	lines []string
}

func (o *outcome) errorf(format string, args ...any) {
	o.t.Helper()
	msg := fmt.Sprintf(format, args...)
	o.t.Error(msg)
	first, _, _ := strings.Cut(msg, "\n")
	if len(first) > 300 {
		first = first[:300] + "..."
	}
	o.lines = append(o.lines, first)
}

func (o *outcome) printVerdict() {
	if !o.t.Failed() {
		return
	}
	if len(o.lines) == 0 {
		o.t.Log("chaos verdict: FAILED (see the errors above)")
		return
	}
	o.t.Logf("chaos verdict: FAILED:\n  - %s", strings.Join(o.lines, "\n  - "))
}

// settings reads CHAOS_SEED and CHAOS_DURATION; short is the default run.
func settings(t *testing.T) (seed uint64, d time.Duration, short bool) {
	seed, d, short = defaultSeed, defaultDuration, true
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED %q: want an unsigned integer: %v", s, err)
		}
		seed, short = n, false
	}
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			t.Fatalf("CHAOS_DURATION %q: want a positive Go duration such as 10m: %v", s, err)
		}
		d, short = v, false
	}
	return seed, d, short
}

// quiesce brings every process up and completes the DELs still owed.
func (r *runner) quiesce(ctx context.Context) error {
	for _, n := range r.c.nodes {
		if up, _ := n.state(); !up {
			return fmt.Errorf("agent %s is down after the run", n.name)
		}
	}
	r.c.ctrl.mu.Lock()
	up := r.c.ctrl.up
	r.c.ctrl.mu.Unlock()
	if !up {
		return fmt.Errorf("ipkeeper-controller is down after the run")
	}
	deadline := time.Now().Add(time.Minute)
	for _, pool := range r.slots {
		for _, s := range pool {
			for len(s.pending) > 0 && time.Now().Before(deadline) {
				r.flushPending(ctx, 0, &s.pending)
			}
		}
	}
	for _, cs := range r.claims {
		for len(cs.pending) > 0 && time.Now().Before(deadline) {
			r.flushPending(ctx, 0, &cs.pending)
		}
	}
	for len(r.vms.pending) > 0 && time.Now().Before(deadline) {
		r.flushPending(ctx, 0, &r.vms.pending)
	}
	if time.Now().After(deadline) {
		return fmt.Errorf("DELs still failing after a minute of quiescence")
	}
	return nil
}

// summary is the one-line account of the run.
func (r *runner) summary(seed uint64, ran time.Duration) string {
	ops := 0
	for k := range numOpKinds {
		ops += r.counts.get("op:" + k.String())
	}
	pf := r.c.proxy.faultCounts()
	var proxy []string
	for f := pfDrop; f < numProxyFaults; f++ {
		proxy = append(proxy, fmt.Sprintf("%s=%d", f, pf[f.String()]))
	}
	return fmt.Sprintf("chaos summary: seed=%d ran=%s ops=%d [%s] cni=[%s] faults=[%s %s watches-cut=%d real-410s=%d proxied-requests=%d crash-restarts=%d] "+
		"exhausted-adds=%d quota-refused-adds=%d lost-dels=%d claims=[deleted=%d claim-ok=%d claim-unfilled=%d (request-refused=%d, in the held storm=%d) refused-after-edit=%d requests-free=%d requests-taken=%d edits=%d edits-skipped=%d vm-claim-made-again-during-add=%d] "+
		"requested=[%s] allowed=[%s] vms=[%s] vm-failed=[%s] macs=[%s] sticky=[%s] guest-config=[%s] virt-controller-restarts=%d claims-maker=[%s] features=[%s %s pool-edit-failed=%d bad-nad-other=%d capi-ready=%d capi-unready=%d capi-deleted=%d nodes-deleted=%d node-blocks-outlived-node=%d storm-controller-kills=%d gc-after-agent-restart=%d] checks=[%s] violations=%d [%s]",
		seed, ran.Round(time.Second), ops, r.counts.with("op:"), r.counts.with("cni:"), r.counts.with("fault:"), strings.Join(proxy, " "),
		r.c.proxy.cuts.Load(), r.c.proxy.gone410.Load(), r.c.proxy.requests.Load(), r.c.crashes.Load(),
		r.counts.get("exhausted"), r.counts.get("quota-refused"), r.counts.get("lost-del"),
		r.counts.get("claims-deleted"), r.counts.get("claim-ok"), r.counts.get("claim-unfilled"), r.counts.get("claim-unfilled-refused"), r.counts.get("held-storm-unfilled"), r.counts.get("claim-refused-after-edit"),
		r.counts.get("claim-requests-free"), r.counts.get("claim-requests-taken"), r.counts.get("claim-edits"), r.counts.get("claim-edit-skipped"), r.counts.get("vm-claim-made-again-during-add"),
		r.counts.with("requested:"), r.counts.with("allowed:"),
		r.counts.with("vm:"), r.counts.with("vm-failed:"), r.counts.with("mac:"), r.counts.with("sticky:"), r.counts.with("guest-config:")+" "+r.counts.with("guest-addresses:")+" "+r.counts.with("guest-addresses-"), r.counts.get("virt-controller-restarts"), r.counts.with("maker:"),
		r.counts.with("pool-edit:"), r.counts.with("bad-nad-refused:"), r.counts.get("pool-edit-failed"), r.counts.get("bad-nad-other"),
		r.counts.get("capi-claim-ready"), r.counts.get("capi-claim-unready"), r.counts.get("capi-claims-deleted"),
		r.counts.get("nodes-deleted"), r.counts.get("node-blocks-outlived-node"), r.counts.get("storm-controller-kills"), r.counts.get("gc-after-agent-restart"),
		r.counts.with("check:"),
		r.viol.count(), r.counts.with("violation:"))
}

// swapped says whether a VM's live NAD swap succeeded yet.
func (r *runner) swapped() bool {
	return r.counts.get("vm:swap")+r.counts.get("vm:swap-hotplug")+r.counts.get("vm:swap-fails") > 0
}

// sharedPoolSwapsMissing names the kinds of live NAD swap within blue's
// shared pool (blueSwaps) no VM has done yet: one whose migration moved
// the VM, and one whose migration failed and was swapped back.
func (r *runner) sharedPoolSwapsMissing() []string {
	var missing []string
	if r.counts.get("vm:swap-in-shared-pool")+r.counts.get("vm:swap-hotplug-in-shared-pool") == 0 {
		missing = append(missing, "done")
	}
	if r.counts.get("vm:swap-fails-in-shared-pool") == 0 {
		missing = append(missing, "failed and swapped back")
	}
	return missing
}

// assertSharedPoolSwaps fails a run that missed a kind of swap within
// blue's shared pool.
func (r *runner) assertSharedPoolSwaps(t *outcome) {
	for _, kind := range r.sharedPoolSwapsMissing() {
		t.errorf("no live NAD swap within a pool two networks share %s", kind)
	}
}

// assertCoverage fails the short run when it did too little to mean
// anything: too few operations, or a fault kind that never fired.
func (r *runner) assertCoverage(t *outcome) {
	ops := 0
	for k := range numOpKinds {
		n := r.counts.get("op:" + k.String())
		ops += n
		if n == 0 {
			t.errorf("operation %s never ran", k)
		}
	}
	if ops < minShortOps {
		t.errorf("%d operations, want at least %d", ops, minShortOps)
	}
	for k := range numFaultKinds {
		if r.counts.get("fault:"+k.String()) == 0 {
			t.errorf("fault %s never fired", k)
		}
	}
	pf := r.c.proxy.faultCounts()
	for f := pfDrop; f < numProxyFaults; f++ {
		if pf[f.String()] == 0 {
			t.errorf("proxy fault %s never fired", f)
		}
	}
	if !r.swapped() {
		t.errorf("no live NAD swap of a VM")
	}
	// The short run tries for both kinds within its extension, but under
	// load a swap's migration may miss its deadline: one of either kind
	// (both judge the running source's address in the shared pool) is
	// enough there; a long run needs both.
	if len(r.sharedPoolSwapsMissing()) == 2 {
		t.errorf("no live NAD swap within a pool two networks share, done or failed and swapped back")
	}
	for _, aspect := range poolAspects {
		if r.counts.get("pool-edit:"+aspect) == 0 {
			t.errorf("no pool edit of its %s", aspect)
		}
	}
	for _, kind := range badDefinitions {
		if r.counts.get("bad-nad-refused:"+kind) == 0 {
			t.errorf("no ADD on a NAD with a %s definition refused with code 7", kind)
		}
	}
	if r.c.proxy.cuts.Load() == 0 {
		t.errorf("no watch was ever cut")
	}
	for what, n := range map[string]int{
		"exhausted ADD on the small network":                   r.counts.get("exhausted"),
		"successful static-IP ADD":                             r.counts.get("static-ok"),
		"successful claim-backed ADD":                          r.counts.get("claim-ok"),
		"successful GC":                                        r.counts.get("cni:" + cniproto.CmdGC + ":ok"),
		"claim edited by the harness":                          r.counts.get("claim-edits"),
		"claim request honoured":                               r.counts.get("requested:True/" + claimstatus.ReasonRequestedReserved),
		"claim request refused (Taken)":                        r.counts.get("requested:False/" + claimstatus.ReasonRequestedTaken),
		"claim request given other addresses (fallback)":       r.counts.get("requested:False/" + claimstatus.ReasonRequestedTakenOthersGiven),
		"launcher ADD refused for an unfilled claim (code 11)": r.counts.get("claim-unfilled"),
		"pod reservation written by an agent (its field manager, which I6 looks for)": r.counts.get("agent-written-pod-reservations"),
		"Cluster API claim filled":                                         r.counts.get("capi-claim-ready"),
		"Cluster API claim deleted":                                        r.counts.get("capi-claims-deleted"),
		"node deleted and made again":                                      r.counts.get("nodes-deleted"),
		"controller killed in a claim storm":                               r.counts.get("storm-controller-kills"),
		"GC after an agent restart between its list and its call":          r.counts.get("gc-after-agent-restart"),
		"reservation name checked against its pool's lock key (I7)":        r.counts.get("check:I7"),
		"reservation labels checked against the agents' watch scopes (I7)": r.counts.get("check:I7-scope"),
		"VM launcher ADD through ipkeeper's webhook and virt-controller":   r.counts.get("vm-launcher-adds"),
		"VM launcher interface with its claim's MAC (I11)":                 r.counts.get("mac:of-address"),
		"VM launcher interface with the VM's own MAC (I11)":                r.counts.get("mac:own"),
		"VM guest network configuration matching its claims (I12)":         r.counts.get("guest-config:matches") + r.counts.get(configSeenKey),
		"VM guest using its claim's addresses (I12)":                       r.counts.get("guest-addresses:"+claimstatus.ReasonGuestUsesItsAddresses) + r.counts.get(guestSeenKey),
		"pod given back the address its MAC held (I13)":                    r.counts.get("sticky:kept"),
		"pool status checked against its reservations (I14)":               r.counts.get("check:I14"),
		"ADD refused by the small pool's quota (I15)":                      r.counts.get("quota-refused"),
		"allocation checked against its quota (I15)":                       r.counts.get("check:I15"),
	} {
		if n == 0 {
			t.errorf("no %s", what)
		}
	}
}

// assertLongCoverage fails a long run in which the VM operations that a
// short run only tries (its virt-controller is not started again when it
// exits) never succeeded: KubeVirt's clone, snapshot and restore; or in
// which no live NAD swap within blue's shared pool was done or rolled
// back, as the short run must have.
func (r *runner) assertLongCoverage(t *outcome) {
	for _, op := range []string{"clone", "restore", "delete-restore"} {
		if r.counts.get("vm:"+op) == 0 {
			t.errorf("no VM %s succeeded", op)
		}
	}
	r.assertSharedPoolSwaps(t)
	// How often a clone's claim got other addresses, and a network
	// plugged back took its address back, shows in the summary's vms=[...]
	// (vm:clone-got-other-addresses, vm:replug-kept-address): a clone or a
	// claim made while ipam-extensions makes the claims has neither, and
	// a long run has few of each, so neither is required.
	if r.counts.get("check:I10") == 0 {
		t.errorf("no VM copy or restore checked (I10)")
	}
}
