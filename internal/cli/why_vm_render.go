// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
)

// renderVM adds the sections of rep.VM to rep: the text why vm prints is
// made from the facts -o json prints, and from nothing else.
func renderVM(rep *Report, now time.Time) {
	f := rep.VM
	rep.add("VM", fmt.Sprintf("status %s, age %s", orNone(f.Status), age(now, f.Created)))
	if f.Retention != "" {
		rep.add("Retention", fmt.Sprintf("%s %s on the VM (ipkeeper-controller caps it at its --max-address-retention)", claimstatus.RetentionAnnotation, f.Retention))
	}
	rep.add("Feature gate", gateLine(f)+" (ipkeeper-controller ignores it when run with --require-kubevirt-feature-gate=false)")
	if f.ClaimsMaker != "" {
		rep.add("Claims maker", fmt.Sprintf("another IPAMClaims controller: webhook %s of MutatingWebhookConfiguration %s (ipam-extensions) makes claims when the VM starts and sets launchers' references; ipkeeper-controller (--claims-controller=auto) fills their addresses", f.ClaimsMakerWebhook, f.ClaimsMaker))
	}
	rep.add("Networks", networkLines(f.Networks)...)
	if len(f.Claims) > 0 {
		rep.add("Claims", usedClaimLines(f.Claims)...)
	}
	rep.add("Reservations", factLines(f.Reservations, now)...)
	rep.add("Launcher pods", launcherLines(f.LauncherPods)...)
	if len(f.Guest) > 0 {
		rep.add("Guest (as its guest agent reports)", guestLines(f.Guest)...)
	}
	rep.add("Events", f.Events...)
}

func gateLine(f *VMFacts) string {
	if f.FeatureGateProblem != "" {
		return "no KubeVirt CR is served: " + f.FeatureGateProblem
	}
	return fmt.Sprintf("%s listed in a KubeVirt CR: %t", kubevirt.PersistentIPsGate, f.FeatureGate)
}

func networkLines(networks []VMNetworkFact) []string {
	if len(networks) == 0 {
		return []string{"no secondary (Multus) networks"}
	}
	var out []string
	for _, n := range networks {
		out = append(out, n.line())
	}
	return out
}

func (n VMNetworkFact) line() string {
	line := fmt.Sprintf("%s (multus.networkName %s)", n.Name, n.NetworkName)
	if n.MAC != "" {
		line = fmt.Sprintf("%s (multus.networkName %s, its own macAddress %s)", n.Name, n.NetworkName, n.MAC)
	}
	switch {
	case n.Unplugging:
		return line + ": being unplugged"
	case n.Problem != "":
		return line + ": " + n.Problem
	}
	return line + fmt.Sprintf(": NAD %s, ", n.NAD) + n.NADFact.line()
}

// usedClaimLines renders the claims of a VM's networks or a pod's
// attachments.
func usedClaimLines(list []UsedClaim) []string {
	var out []string
	for _, c := range list {
		switch {
		case !c.Found && c.Network != "":
			out = append(out, fmt.Sprintf("IPAMClaim %s (network %s): not found", c.Name, c.Network))
			continue
		case !c.Found:
			out = append(out, fmt.Sprintf("IPAMClaim %s: not found", c.Name))
			continue
		}
		for _, l := range c.Claim.lines() {
			out = append(out, fmt.Sprintf("IPAMClaim %s: %s", c.Name, l))
		}
	}
	return out
}

func launcherLines(pods []LauncherPodFact) []string {
	var out []string
	for _, p := range pods {
		line := fmt.Sprintf("%s: phase %s, node %s", p.Name, p.Phase, orNone(p.Node))
		if p.AnnotationProblem != "" {
			out = append(out, line+": "+p.AnnotationProblem)
			continue
		}
		var refs []string
		for _, r := range p.References {
			refs = append(refs, r.line())
		}
		if len(refs) > 0 {
			line += "; " + strings.Join(refs, "; ")
		}
		out = append(out, line)
	}
	return out
}

func (r ClaimRefFact) line() string {
	switch r.Reference {
	case r.Want:
		return fmt.Sprintf("network %s: webhook reference %q present, mac %s", r.Network, r.Reference, orNone(r.MAC))
	case "":
		return fmt.Sprintf("network %s: webhook reference missing", r.Network)
	}
	return fmt.Sprintf("network %s: references %q, not %q", r.Network, r.Reference, r.Want)
}

func guestLines(list []GuestInterfaceFact) []string {
	var out []string
	for _, g := range list {
		out = append(out, fmt.Sprintf("%s: %s, MAC %s, addresses %s", orNone(g.Name), orNone(g.InterfaceName), orNone(g.MAC), orNone(strings.Join(g.IPs, ", "))))
	}
	return out
}
