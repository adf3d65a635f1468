// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientretry "k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/naming"
)

var uninstallCommand = command{
	name:     "uninstall",
	synopsis: "[-n INSTALL-NAMESPACE] [--dry-run] [--force] [--release-claims] [-o FORMAT]",
	summary:  "Remove ipkeeper's finalizers once ipkeeper-controller is uninstalled, so that deleting the CRDs does not hang.",
	formats:  formats(outputJSON, outputYAML),
	setup:    setupUninstall,
	args:     noArgs("uninstall"),
}

// uninstallOptions are uninstall's own flags.
type uninstallOptions struct {
	dryRun, force, releaseClaims bool
}

func setupUninstall(fs *pflag.FlagSet) runFunc {
	var o uninstallOptions
	fs.BoolVar(&o.dryRun, "dry-run", false, "list the finalizers that would be removed and change nothing")
	fs.BoolVar(&o.force, "force", false, "remove them even while ipkeeper-controller looks alive (it puts them back)")
	fs.BoolVar(&o.releaseClaims, "release-claims", false, "also remove "+claimsFinalizerName+" from the IPAMClaims ipkeeper manages (their VMs' addresses are no longer kept)")
	return func(ctx context.Context, s *session, _ []string) error { return runUninstall(ctx, s, o) }
}

// RemovedFinalizer is one finalizer uninstall removed (with --dry-run:
// would remove) from one object.
type RemovedFinalizer struct {
	Kind      string `json:"kind"`
	Group     string `json:"group"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Finalizer string `json:"finalizer"`
}

func runUninstall(ctx context.Context, s *session, o uninstallOptions) error {
	ns := installNamespace(s)
	if !o.force {
		err := refuseWhileRunning(ctx, s.client, ns, s.now())
		var running *runningError
		switch {
		case o.dryRun && errors.As(err, &running):
			// A dry run still lists, and says what the real run would do.
			fmt.Fprintf(s.errOut, "Warning: %v; without --dry-run uninstall refuses.\n", err)
		case err != nil:
			return err
		}
	}
	var removed []RemovedFinalizer
	for _, kf := range ipkeeperFinalizers(o.releaseClaims) {
		rows, err := uninstallKind(ctx, s, kf, o.dryRun)
		if err != nil {
			return err
		}
		removed = append(removed, rows...)
	}
	return printUninstall(s, removed, o.dryRun)
}

// installNamespace is -n, else ipkeeper's default namespace: the
// context's namespace is where users work, not where ipkeeper runs.
func installNamespace(s *session) string {
	if s.namespaceSet {
		return s.namespace
	}
	return naming.DefaultNamespace
}

// uninstallKind removes kf's finalizers from every object of its kind; a
// kind the API server does not serve (its CRD not installed) is skipped.
func uninstallKind(ctx context.Context, s *session, kf kindFinalizers, dryRun bool) ([]RemovedFinalizer, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(kf.gvk.GroupVersion().WithKind(kf.gvk.Kind + "List"))
	if err := s.client.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			fmt.Fprintf(s.errOut, "%s.%s is not installed (no CRD): skipped.\n", kf.gvk.Kind, kf.gvk.Group)
			return nil, nil
		}
		return nil, fmt.Errorf("listing %s.%s: %w", kf.gvk.Kind, kf.gvk.Group, err)
	}
	var rows []RemovedFinalizer
	for i := range list.Items {
		obj := &list.Items[i]
		obj.SetGroupVersionKind(kf.gvk)
		names := kf.held(obj)
		if len(names) == 0 {
			continue
		}
		if !dryRun {
			if err := removeFinalizers(ctx, s.client, obj, kf); err != nil {
				return nil, err
			}
		}
		rows = append(rows, removedRows(kf.gvk, obj, names)...)
	}
	return rows, nil
}

func removedRows(gvk schema.GroupVersionKind, obj metav1.Object, names []string) []RemovedFinalizer {
	rows := make([]RemovedFinalizer, len(names))
	for i, f := range names {
		rows[i] = RemovedFinalizer{Kind: gvk.Kind, Group: gvk.Group, Namespace: obj.GetNamespace(), Name: obj.GetName(), Finalizer: f}
	}
	return rows
}

// removeFinalizers removes ipkeeper's finalizers from obj with a merge
// patch at the resourceVersion read: the patch replaces the whole list, so
// a finalizer another writer added meanwhile must not be lost. A conflict
// reads the object again and retries.
func removeFinalizers(ctx context.Context, c client.Client, obj *metav1.PartialObjectMetadata, kf kindFinalizers) error {
	err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		names := kf.held(obj)
		if len(names) == 0 {
			return nil
		}
		before := obj.DeepCopy()
		obj.SetFinalizers(slices.DeleteFunc(slices.Clone(obj.Finalizers), func(f string) bool { return slices.Contains(names, f) }))
		err := c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			if gerr := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); gerr != nil {
				return gerr
			}
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing ipkeeper's finalizers from %s %s: %w", kf.gvk.Kind, objectKey(obj), err)
	}
	return nil
}

// objectKey is namespace/name, or name for a cluster-scoped object.
func objectKey(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

func printUninstall(s *session, removed []RemovedFinalizer, dryRun bool) error {
	if len(removed) == 0 && s.output.isTable() {
		fmt.Fprintln(s.errOut, "No ipkeeper finalizers found.")
		return nil
	}
	if removed == nil {
		removed = []RemovedFinalizer{}
	}
	if dryRun && s.output.isTable() {
		fmt.Fprintln(s.errOut, "Dry run: nothing was changed; without --dry-run these finalizers are removed.")
	}
	names := make([]objectName, len(removed))
	for i, r := range removed {
		names[i] = objectName{gvk: schema.GroupVersionKind{Group: r.Group, Kind: r.Kind}, name: r.Name}
	}
	return s.print(printable{doc: removed, names: names, table: func(w io.Writer, _ bool) error { return uninstallTable(w, removed) }})
}

func uninstallTable(w io.Writer, removed []RemovedFinalizer) error {
	t := newTable(w, "KIND", "NAMESPACE", "NAME", "FINALIZER")
	for _, r := range removed {
		t.row(r.Kind+"."+r.Group, r.Namespace, r.Name, r.Finalizer)
	}
	return t.flush()
}
