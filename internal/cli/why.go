// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// whyFormats are the -o values of why and its kind commands.
var whyFormats = formats(outputJSON, outputYAML)

var whyCommand = command{
	name:     "why",
	synopsis: "pod/NAME | ipamclaim/NAME | vm/NAME [-n NAMESPACE] [-o FORMAT]",
	summary:  "Explain what ipkeeper sees for a pod, an IPAMClaim or a VM, and what to do next.",
	formats:  whyFormats,
	setup:    func(*pflag.FlagSet) runFunc { return runWhy },
	args: func(args []string) error {
		_, _, err := whyTarget(args)
		return err
	},
	complete: func(context.Context, *session, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"pod/", "ipamclaim/", "vm/"}, cobra.ShellCompDirectiveNoSpace
	},
	children: []command{
		whyKindCommand(whyPodKind, "Explain a pod: its networks, claims, reservations and last CNI failure."),
		whyKindCommand(whyClaimKind, "Explain an IPAMClaim: its owner, addresses, conditions and reservations."),
		whyKindCommand(whyVMKind, "Explain a VM: the feature gate, its networks, claims, reservations and launcher pods."),
	},
}

// whyKindCommand is `why KIND NAME`: the same report as `why KIND/NAME`,
// with its own help and the names of that kind to complete.
func whyKindCommand(k whyKind, summary string) command {
	return command{
		name:     k.names[0],
		aliases:  k.names[1:],
		synopsis: "NAME [-n NAMESPACE] [-o FORMAT]",
		summary:  summary,
		formats:  whyFormats,
		setup: func(*pflag.FlagSet) runFunc {
			return func(ctx context.Context, s *session, args []string) error { return explain(ctx, s, k, args[0]) }
		},
		args: func(args []string) error {
			if len(args) != 1 {
				return usageErrorf("why %s takes one name, got %d arguments", k.names[0], len(args))
			}
			return nil
		},
		complete: func(ctx context.Context, s *session, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return k.listNames(ctx, s), cobra.ShellCompDirectiveNoFileComp
		},
	}
}

// Report is what why found: facts by section, then what to do.
type Report struct {
	Object   string    `json:"object"`
	Sections []Section `json:"sections"`
	Next     []string  `json:"next"`
	// Pod, Claim and VM are what why pod, why ipamclaim and why vm found,
	// typed: the sections are rendered from them.
	Pod   *PodReport   `json:"pod,omitempty"`
	Claim *ClaimReport `json:"claim,omitempty"`
	VM    *VMFacts     `json:"vm,omitempty"`
}

// Section is a titled list of facts.
type Section struct {
	Title string   `json:"title"`
	Lines []string `json:"lines"`
}

func (r *Report) add(title string, lines ...string) {
	if len(lines) == 0 {
		lines = []string{"none"}
	}
	r.Sections = append(r.Sections, Section{Title: title, Lines: lines})
}

func (r *Report) next(format string, args ...any) {
	r.Next = append(r.Next, fmt.Sprintf(format, args...))
}

// whyKind is a kind why explains: the names it is given by (the first
// its command's), the object's kind (for -o name and completion) and its
// explainer.
type whyKind struct {
	names   []string
	gvk     schema.GroupVersionKind
	explain func(ctx context.Context, s *session, key types.NamespacedName) (*Report, error)
}

var (
	whyPodKind   = whyKind{names: []string{"pod", "pods", "po"}, gvk: corev1.SchemeGroupVersion.WithKind("Pod"), explain: whyPod}
	whyClaimKind = whyKind{names: []string{"ipamclaim", "ipamclaims"}, gvk: ipamclaimsv1alpha1.SchemeGroupVersion.WithKind("IPAMClaim"), explain: whyClaim}
	whyVMKind    = whyKind{names: []string{"vm", "vms", "virtualmachine", "virtualmachines"}, gvk: kubevirtv1.VirtualMachineGroupVersionKind, explain: whyVM}
)

// whyKinds maps the accepted resource names to their kinds.
var whyKinds = func() map[string]whyKind {
	m := map[string]whyKind{}
	for _, k := range []whyKind{whyPodKind, whyClaimKind, whyVMKind} {
		for _, n := range k.names {
			m[n] = k
		}
	}
	return m
}()

// listNames are the names of the kind's objects in the session's
// namespace, for completion (none when they cannot be listed).
func (k whyKind) listNames(ctx context.Context, s *session) []string {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
	if err := s.client.List(ctx, list, client.InNamespace(s.namespace)); err != nil {
		return nil
	}
	names := make([]string, 0, len(list.Items))
	for _, o := range list.Items {
		names = append(names, o.Name)
	}
	return names
}

// whyTarget is why's argument: KIND/NAME, or KIND NAME.
func whyTarget(args []string) (whyKind, string, error) {
	var kind, name string
	switch len(args) {
	case 1:
		var ok bool
		if kind, name, ok = strings.Cut(args[0], "/"); !ok {
			return whyKind{}, "", usageErrorf("%q: name the object as pod/NAME, ipamclaim/NAME or vm/NAME", args[0])
		}
	case 2:
		kind, name = args[0], args[1]
	default:
		return whyKind{}, "", usageErrorf("why takes one object (pod/NAME, ipamclaim/NAME or vm/NAME), got %d arguments", len(args))
	}
	k, ok := whyKinds[strings.ToLower(kind)]
	if !ok || name == "" {
		return whyKind{}, "", usageErrorf("%q: name the object as pod/NAME, ipamclaim/NAME or vm/NAME", strings.Join(args, " "))
	}
	return k, name, nil
}

func runWhy(ctx context.Context, s *session, args []string) error {
	k, name, err := whyTarget(args)
	if err != nil {
		return err
	}
	return explain(ctx, s, k, name)
}

// explain prints the report of one object of kind k in the session's
// namespace.
func explain(ctx context.Context, s *session, k whyKind, name string) error {
	if s.allNamespaces {
		return usageErrorf("why looks at one object: use -n, not -A")
	}
	rep, err := k.explain(ctx, s, types.NamespacedName{Namespace: s.namespace, Name: name})
	if err != nil {
		return err
	}
	return s.print(printable{doc: rep, names: []objectName{{gvk: k.gvk, name: name}}, table: func(w io.Writer, _ bool) error { return rep.write(w) }})
}

// write renders the report as text: the object, its sections, then the
// Next lines.
func (r *Report) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintln(&b, r.Object)
	for _, sec := range r.Sections {
		fmt.Fprintf(&b, "%s:\n", sec.Title)
		for _, l := range sec.Lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	for _, n := range r.Next {
		fmt.Fprintf(&b, "Next: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// eventsOf returns the events about one object (that UID), oldest first.
func eventsOf(ctx context.Context, c client.Reader, namespace, kind, name string, uid types.UID) ([]corev1.Event, error) {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingFields{"involvedObject.kind": kind, "involvedObject.name": name}); err != nil {
		return nil, fmt.Errorf("listing the events of %s %s/%s: %w", kind, namespace, name, err)
	}
	out := list.Items[:0]
	for _, e := range list.Items {
		if uid == "" || e.InvolvedObject.UID == "" || e.InvolvedObject.UID == uid {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(&out[i]).Before(eventTime(&out[j])) })
	return out, nil
}

// eventTime is when an event last happened.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	}
	return e.CreationTimestamp.Time
}

// eventLines renders the last n events, oldest first.
func eventLines(events []corev1.Event, n int, now time.Time) []string {
	if len(events) > n {
		events = events[len(events)-n:]
	}
	var out []string
	for i := range events {
		e := &events[i]
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		out = append(out, fmt.Sprintf("%s ago %s %s%s: %s", age(now, eventTime(e)), e.Type, e.Reason, count, e.Message))
	}
	return out
}

// ObjectFact names the object a why report is about.
type ObjectFact struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	UID       types.UID `json:"uid"`
	Created   time.Time `json:"created"`
}

// OwnerFacts are what the reports of pods and VMs share: the object, the
// claims it keeps addresses in, the reservations held for it (its own and
// its claims') and its last events, as the text prints them.
type OwnerFacts struct {
	ObjectFact
	Claims       []UsedClaim       `json:"claims,omitempty"`
	Reservations []ReservationFact `json:"reservations"`
	Events       []string          `json:"events"`
}

// runSteps runs a report's steps in order, up to the first error.
func runSteps(ctx context.Context, steps ...func(context.Context) error) error {
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func objectFact(o metav1.Object) ObjectFact {
	return ObjectFact{Name: o.GetName(), Namespace: o.GetNamespace(), UID: o.GetUID(), Created: o.GetCreationTimestamp().Time}
}

// ReservationFact is one reservation as a why report states it.
type ReservationFact struct {
	Reservation string    `json:"reservation"`
	IP          string    `json:"ip"`
	Pool        string    `json:"pool"`
	Network     string    `json:"network"`
	Interface   string    `json:"interface,omitempty"`
	Node        string    `json:"node,omitempty"`
	Created     time.Time `json:"created"`
	State       string    `json:"state"`
}

// reservationFacts are the facts of reservations, their state as of now.
func reservationFacts(list []ipkeeperv1alpha1.IPReservation, now time.Time) []ReservationFact {
	out := make([]ReservationFact, 0, len(list))
	for i := range list {
		r := &list[i]
		out = append(out, ReservationFact{
			Reservation: r.Name, IP: r.Spec.IP, Pool: r.Spec.Pool, Network: r.Spec.Network,
			Interface: r.Spec.InterfaceName, Node: r.Spec.Node, Created: r.CreationTimestamp.Time,
			State: reservationState(&r.Spec, now),
		})
	}
	return out
}

// line is the fact as a report's text says it.
func (f ReservationFact) line(now time.Time) string {
	line := fmt.Sprintf("%s in pool %s (network %s", f.IP, f.Pool, f.Network)
	if f.Interface != "" {
		line += ", interface " + f.Interface
	}
	if f.Node != "" {
		line += ", node " + f.Node
	}
	return line + fmt.Sprintf("), reservation %s, age %s, %s", f.Reservation, age(now, f.Created), f.State)
}

// factLines renders reservation facts for a report.
func factLines(facts []ReservationFact, now time.Time) []string {
	var out []string
	for _, f := range facts {
		out = append(out, f.line(now))
	}
	return out
}
