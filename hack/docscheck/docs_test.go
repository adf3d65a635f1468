// SPDX-License-Identifier: Apache-2.0

package docscheck

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/cli"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
)

// doc is one Markdown file (or the Makefile), by path from the repository
// root.
type doc struct {
	path  string
	lines []string
}

func (d doc) text() string { return strings.Join(d.lines, "\n") }

// problems collects what a test finds, one line each, reported together.
type problems []string

func (p *problems) add(d doc, line int, format string, args ...any) {
	*p = append(*p, fmt.Sprintf("%s:%d: %s", d.path, line+1, fmt.Sprintf(format, args...)))
}

func (p problems) report(t *testing.T, what string) {
	t.Helper()
	if len(p) > 0 {
		t.Errorf("%s:\n  %s", what, strings.Join(p, "\n  "))
	}
}

// root is the repository root: the go test working directory's ancestors'
// first with go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func readDoc(t *testing.T, rootDir, rel string) doc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rootDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return doc{path: rel, lines: strings.Split(string(b), "\n")}
}

// docs are README.md and every Markdown file under docs/.
func docs(t *testing.T) []doc {
	t.Helper()
	r := root(t)
	out := []doc{readDoc(t, r, "README.md")}
	err := filepath.WalkDir(filepath.Join(r, "docs"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, err := filepath.Rel(r, path)
		if err != nil {
			return err
		}
		out = append(out, readDoc(t, r, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func allText(ds []doc) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.text())
		b.WriteString("\n")
	}
	return b.String()
}

// --- binaries ---

var (
	cmdPathRE  = regexp.MustCompile(`(^|[^/A-Za-z0-9_.-])cmd/([a-z0-9-]+)`)
	binPathRE  = regexp.MustCompile("(^|[\\s`(:])bin/([a-z0-9-]+)\\b(/?)")
	binCountRE = regexp.MustCompile(`(?i)\b(two|three|four|five|six|seven|eight)\s+(?:static\s+)?binaries\b`)
)

var numberWords = map[string]int{"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}

// binaries are the directories under cmd/ with a main.go.
func binaries(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root(t), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root(t), "cmd", e.Name(), "main.go")); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatal("no binaries under cmd/")
	}
	return out
}

func TestDocsNameTheBinariesThatExist(t *testing.T) {
	bins := binaries(t)
	ds := append(docs(t), readDoc(t, root(t), "Makefile"))
	var p problems
	for _, d := range ds {
		for i, line := range d.lines {
			for _, m := range cmdPathRE.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(bins, m[2]) {
					p.add(d, i, "cmd/%s: no such binary (cmd/ has %s)", m[2], strings.Join(bins, ", "))
				}
			}
			for _, m := range binPathRE.FindAllStringSubmatch(line, -1) {
				// bin/image is make image's output directory.
				if m[3] == "" && m[2] != "image" && !slices.Contains(bins, m[2]) {
					p.add(d, i, "bin/%s: no such binary (cmd/ has %s)", m[2], strings.Join(bins, ", "))
				}
			}
			for _, m := range binCountRE.FindAllStringSubmatch(line, -1) {
				if n := numberWords[strings.ToLower(m[1])]; n != len(bins) {
					p.add(d, i, "%q: there are %d binaries (%s)", m[0], len(bins), strings.Join(bins, ", "))
				}
			}
		}
	}
	p.report(t, "binaries named in the docs that do not exist, or miscounted")
}

func TestEveryBinaryIsNamedInREADMEAndInstall(t *testing.T) {
	r := root(t)
	var missing []string
	for _, rel := range []string{"README.md", "docs/install.md"} {
		text := readDoc(t, r, rel).text()
		for _, b := range binaries(t) {
			if !namesBinary(text, b) {
				missing = append(missing, fmt.Sprintf("%s does not name %s", rel, b))
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("binaries not named where a user looks for them:\n  %s", strings.Join(missing, "\n  "))
	}
}

// namesBinary: the CNI plugin "ipkeeper" counts only as a code span or a
// cmd/ path (the bare word is the project), kubectl-ipkeeper also as
// "kubectl ipkeeper" (how kubectl runs it), the rest as a word.
func namesBinary(text, b string) bool {
	switch b {
	case "ipkeeper":
		return strings.Contains(text, "`ipkeeper`") || regexp.MustCompile(`(^|[^/A-Za-z0-9_.-])cmd/ipkeeper\b[^-]`).MatchString(text)
	case "kubectl-ipkeeper":
		if strings.Contains(text, "kubectl ipkeeper") {
			return true
		}
	}
	return regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(b) + `($|[^A-Za-z0-9_-])`).MatchString(text)
}

// --- CRDs ---

// ourGroups are the API groups whose CRDs ipkeeper ships: a CRD of these
// groups named in the docs must be in manifests/crds.
var ourGroups = []string{"ipkeeper.io", "k8s.cni.cncf.io"}

// foreignNames are <name>.<our group> names that are not CRDs, with why.
var foreignNames = map[string]string{
	"ipam-claims.k8s.cni.cncf.io": "the pod webhook of KubeVirt's ipam-extensions, which ipkeeper-controller looks for",
}

type crd struct {
	file string
	apiextensionsv1.CustomResourceDefinition
}

func readCRDs(t *testing.T, dirs ...string) []crd {
	t.Helper()
	var out []crd
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root(t), dir), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") || filepath.Base(path) == "kustomization.yaml" {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var c crd
			if err := yaml.Unmarshal(b, &c.CustomResourceDefinition); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if c.Kind == "CustomResourceDefinition" {
				c.file = path
				out = append(out, c)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// webhookNames are the names of the webhooks ipkeeper registers.
func webhookNames(t *testing.T) []string {
	t.Helper()
	var names []string
	files, err := filepath.Glob(filepath.Join(root(t), "manifests", "base", "webhook", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*- name: (\S+)\s*$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

var (
	groupNameRE   = regexp.MustCompile(`(^|[^A-Za-z0-9.-])([a-z0-9-]+)\.(ipkeeper\.io|k8s\.cni\.cncf\.io)($|[^A-Za-z0-9./-])`)
	kubectlResRE  = regexp.MustCompile(`kubectl (?:-n \S+ )?(?:get|describe|edit|delete|patch|annotate|label|explain) ([a-z][a-zA-Z0-9.,/-]*)`)
	fenceRE       = regexp.MustCompile("^\\s*```\\s*([a-z]*)")
	yamlAPIRE     = regexp.MustCompile(`^apiVersion:\s*(\S+)\s*$`)
	yamlKindRE    = regexp.MustCompile(`^kind:\s*(\S+)\s*$`)
	docSeparator  = regexp.MustCompile(`^---\s*$`)
	resourceNames = func(c crd) []string {
		n := c.Spec.Names
		return append([]string{n.Plural, n.Singular, strings.ToLower(n.Kind)}, n.ShortNames...)
	}
)

func TestDocsNameTheCRDsThatExist(t *testing.T) {
	shipped := readCRDs(t, "manifests/crds")
	known := append(readCRDs(t, "tests/crds"), shipped...) // resources of other projects' CRDs the docs use
	hooks := webhookNames(t)
	isOurs := func(group string) bool { return slices.Contains(ourGroups, group) }
	var p problems
	ds := docs(t)
	for _, d := range ds {
		yamlBlock := false
		var apiVersion string
		for i, line := range d.lines {
			for _, m := range groupNameRE.FindAllStringSubmatch(line, -1) {
				name := m[2] + "." + m[3]
				ok := slices.Contains(hooks, name) || foreignNames[name] != ""
				for _, c := range shipped {
					ok = ok || c.Name == name
				}
				if !ok {
					p.add(d, i, "%s: no CRD of that name in manifests/crds (nor one of ipkeeper's webhooks)", name)
				}
			}
			for _, m := range kubectlResRE.FindAllStringSubmatch(line, -1) {
				for _, res := range strings.Split(strings.SplitN(m[1], "/", 2)[0], ",") {
					name, group, dotted := strings.Cut(res, ".")
					candidates := known
					if dotted {
						if !isOurs(group) {
							continue
						}
						candidates = shipped
					} else if !strings.HasPrefix(name, "ip") {
						continue // built-in resources and other projects'
					}
					found := false
					for _, c := range candidates {
						found = found || ((!dotted || c.Spec.Group == group) && slices.Contains(resourceNames(c), name))
					}
					if !found {
						p.add(d, i, "kubectl resource %q: no CRD has it as plural, singular or short name", res)
					}
				}
			}
			// Manifests in yaml code blocks: a kind of our groups must be
			// served by a shipped CRD at that version.
			if m := fenceRE.FindStringSubmatch(line); m != nil {
				yamlBlock = !yamlBlock && (m[1] == "yaml" || m[1] == "yml")
				apiVersion = ""
				continue
			}
			if !yamlBlock {
				continue
			}
			if docSeparator.MatchString(line) {
				apiVersion = ""
			}
			if m := yamlAPIRE.FindStringSubmatch(line); m != nil {
				apiVersion = m[1]
			}
			if m := yamlKindRE.FindStringSubmatch(line); m != nil && apiVersion != "" {
				group, version, _ := strings.Cut(apiVersion, "/")
				if isOurs(group) && !served(shipped, group, version, m[1]) {
					p.add(d, i, "kind %s in %s: no CRD in manifests/crds serves it", m[1], apiVersion)
				}
			}
		}
	}
	p.report(t, "CRDs named in the docs that manifests/crds does not have")
}

func served(crds []crd, group, version, kind string) bool {
	for _, c := range crds {
		if c.Spec.Group != group || c.Spec.Names.Kind != kind {
			continue
		}
		for _, v := range c.Spec.Versions {
			if v.Name == version && v.Served {
				return true
			}
		}
	}
	return false
}

func TestEveryShippedCRDIsDocumented(t *testing.T) {
	text := allText(docs(t))
	word := func(s string) bool {
		return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(s) + `($|[^A-Za-z0-9_])`).MatchString(text)
	}
	var missing []string
	for _, c := range readCRDs(t, "manifests/crds") {
		if !word(c.Spec.Names.Kind) {
			missing = append(missing, fmt.Sprintf("%s: its kind %s", c.file, c.Spec.Names.Kind))
		}
		if !word(c.Name) && !word(c.Spec.Names.Plural) {
			missing = append(missing, fmt.Sprintf("%s: its name %s (or resource %s)", c.file, c.Name, c.Spec.Names.Plural))
		}
	}
	if len(missing) > 0 {
		t.Errorf("CRDs of manifests/crds that README.md and docs/ never name:\n  %s", strings.Join(missing, "\n  "))
	}
}

// --- flags ---

// foreignFlags are flags of other tools that the docs show, with the tool.
// A flag of ipkeeper's binaries needs no entry.
var foreignFlags = map[string]string{
	"all":                       "skopeo copy --all",
	"archive":                   "kubectl krew install --archive",
	"build-arg":                 "docker build --build-arg",
	"cascade":                   "kubectl delete --cascade",
	"enable-aggregator-routing": "kube-apiserver --enable-aggregator-routing (the real-node lane)",
	"controllers":               "kube-controller-manager --controllers (the test control plane)",
	"create-namespace":          "helm install --create-namespace",
	"env":                       "hack/tools.sh --env",
	"field-selector":            "kubectl get --field-selector",
	"fix":                       "hack/check-license.sh --fix",
	"flag":                      "a placeholder, --flag=value",
	"force-conflicts":           "kubectl apply --server-side --force-conflicts",
	"format":                    "git log --format",
	"help":                      "the help every command has",
	"local":                     "cloud-init init --local (the real-node lane's cloud-init guest)",
	"manifest":                  "kubectl krew install --manifest",
	"net":                       "unshare --net (the real-node lane)",
	"ignore-not-found":          "kubectl delete --ignore-not-found",
	"kube-version":              "helm template --kube-version",
	"overwrite":                 "kubectl annotate --overwrite",
	"reuse-values":              "helm upgrade --reuse-values",
	"root-dir":                  "netplan generate --root-dir",
	"server-side":               "kubectl apply --server-side",
	"set":                       "helm install --set",
	"strict":                    "helm lint --strict, kubeconform -strict",
	"type":                      "kubectl patch --type",
	"unix-socket":               "curl --unix-socket",
}

// flagRE finds --name; a name ending in "-" is an ASCII arrow ("--exec-->").
var flagRE = regexp.MustCompile(`(^|[^A-Za-z0-9_-])--([a-z][a-z0-9-]*)`)

func flagNames(line string) []string {
	var out []string
	for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
		if !strings.HasSuffix(m[2], "-") {
			out = append(out, m[2])
		}
	}
	return out
}

func goFlags(fs *flag.FlagSet) map[string]bool {
	out := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	return out
}

func controllerFlags() map[string]bool {
	var c manager.CommandOptions
	return goFlags(c.FlagSet())
}

func agentFlags() map[string]bool {
	var a agent.CommandOptions
	return goFlags(a.FlagSet())
}

// pluginFlags are kubectl ipkeeper's flags by command: long names, and
// shorthands with a leading "-".
func pluginFlags() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for cmd, fs := range cli.FlagSets() {
		out[cmd] = map[string]bool{}
		fs.VisitAll(func(f *pflag.Flag) {
			out[cmd][f.Name] = true
			if f.Shorthand != "" {
				out[cmd]["-"+f.Shorthand] = true
			}
		})
	}
	return out
}

var (
	headingRE       = regexp.MustCompile(`^#+\s+(.*)`)
	pluginCommandRE = regexp.MustCompile(`kubectl ipkeeper ([a-z][a-z-]*)(.*)`)
)

func TestDocsNameTheFlagsThatExist(t *testing.T) {
	ctrl, agt, plugin := controllerFlags(), agentFlags(), pluginFlags()
	var p problems
	for _, d := range docs(t) {
		section := ""
		for i, line := range d.lines {
			if m := headingRE.FindStringSubmatch(line); m != nil {
				section = strings.ToLower(m[1])
			}
			for _, f := range flagNames(line) {
				ours := ctrl[f] || agt[f]
				for _, fs := range plugin {
					ours = ours || fs[f]
				}
				if !ours && foreignFlags[f] == "" {
					p.add(d, i, "--%s: not a flag of ipkeeper-controller, ipkeeper-agent or kubectl ipkeeper (another tool's? list it in foreignFlags)", f)
				}
			}
			// A flag table names the flags of the binary its heading names.
			if strings.HasPrefix(strings.TrimSpace(line), "|") {
				for binary, set := range map[string]map[string]bool{"agent flags": agt, "controller flags": ctrl} {
					if !strings.Contains(section, binary) {
						continue
					}
					for _, f := range flagNames(line) {
						if !set[f] {
							p.add(d, i, "--%s in the table under %q: not a flag of that binary", f, section)
						}
					}
				}
			}
			// "kubectl ipkeeper <command> --flag": that command's flag.
			if m := pluginCommandRE.FindStringSubmatch(line); m != nil {
				if set, ok := plugin[m[1]]; ok {
					for _, f := range flagNames(m[2]) {
						if !set[f] && f != "help" {
							p.add(d, i, "--%s: not a flag of kubectl ipkeeper %s", f, m[1])
						}
					}
				}
			}
		}
	}
	p.report(t, "flags named in the docs that do not exist")
}

func TestEveryFlagIsDocumented(t *testing.T) {
	text := allText(docs(t))
	documented := func(name string) bool {
		return regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_-])`).MatchString(text)
	}
	var missing []string
	for binary, set := range map[string]map[string]bool{"ipkeeper-controller": controllerFlags(), "ipkeeper-agent": agentFlags()} {
		for f := range set {
			if !documented("--" + f) {
				missing = append(missing, binary+" --"+f)
			}
		}
	}
	cliDoc := readDoc(t, root(t), "docs/cli.md").text()
	for cmd, fs := range cli.FlagSets() {
		fs.VisitAll(func(f *pflag.Flag) {
			long := regexp.MustCompile(`(^|[^A-Za-z0-9_-])--` + regexp.QuoteMeta(f.Name) + `($|[^A-Za-z0-9_-])`)
			short := f.Shorthand != "" && regexp.MustCompile(`(^|[^A-Za-z0-9_-])-`+f.Shorthand+`($|[^A-Za-z0-9_-])`).MatchString(cliDoc)
			if !long.MatchString(cliDoc) && !short {
				missing = append(missing, "kubectl ipkeeper "+cmd+" --"+f.Name+" (in docs/cli.md)")
			}
		})
	}
	sort.Strings(missing)
	missing = slices.Compact(missing)
	if len(missing) > 0 {
		t.Errorf("flags no document names:\n  %s", strings.Join(missing, "\n  "))
	}
}

// --- metrics ---

// metricNameRE is a whole ipkeeper metric name.
var metricNameRE = regexp.MustCompile(`^ipkeeper_[a-z0-9_]*[a-z0-9]$`)

// codeMetrics are the metric names the Go sources define, with the file
// that defines each: the Name, Namespace and Subsystem of every
// prometheus.*Opts literal outside tests, and every other string literal
// that is a whole ipkeeper_* name (prometheus.NewDesc's, custom
// collectors'), and the kind of each *Opts literal ("CounterOpts",
// "HistogramOpts", ...; none for the other literals): histograms have
// _bucket, _sum and _count series.
func codeMetrics(t *testing.T) (names, kinds map[string]string) {
	t.Helper()
	names, kinds = map[string]string{}, map[string]string{}
	r := root(t)
	for _, dir := range []string{"cmd", "internal", "pkg"} {
		err := filepath.WalkDir(filepath.Join(r, dir), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			return metricsOfFile(path, names, kinds)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names, kinds
}

func metricsOfFile(path string, names, kinds map[string]string) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	promName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/prometheus/client_golang/prometheus" {
			promName = "prometheus"
			if imp.Name != nil {
				promName = imp.Name.Name
			}
		}
	}
	if promName == "" {
		return nil
	}
	var walkErr error
	ast.Inspect(f, func(n ast.Node) bool {
		// A whole metric name as a string literal: what NewDesc and the
		// constructors of custom collectors take.
		if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			if v, err := strconv.Unquote(bl.Value); err == nil && metricNameRE.MatchString(v) {
				names[v] = path
			}
			return true
		}
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := lit.Type.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != promName {
			return true
		}
		parts := map[string]string{}
		for _, elt := range lit.Elts {
			kv, ok := elt.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil || (key.Name != "Name" && key.Name != "Namespace" && key.Name != "Subsystem") {
				continue
			}
			bl, ok := kv.Value.(*ast.BasicLit)
			if !ok || bl.Kind != token.STRING {
				walkErr = fmt.Errorf("%s: the %s of a metric is not a string literal: the docs check cannot read it", fset.Position(kv.Pos()), key.Name)
				return false
			}
			parts[key.Name], _ = strconv.Unquote(bl.Value)
		}
		if name := prometheus.BuildFQName(parts["Namespace"], parts["Subsystem"], parts["Name"]); strings.HasPrefix(name, "ipkeeper_") {
			names[name] = path
			kinds[name] = sel.Sel.Name
		}
		return true
	})
	return walkErr
}

// TestCodeMetricsMatchTheRegistry checks codeMetrics against what the
// controller's packages really register: every ipkeeper metric in
// controller-runtime's registry with a value (vectors appear once they
// have a child) must be one the source scan found.
func TestCodeMetricsMatchTheRegistry(t *testing.T) {
	names, _ := codeMetrics(t)
	families, err := controllerRegistry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), "ipkeeper_") {
			continue
		}
		seen++
		if _, ok := names[mf.GetName()]; !ok {
			t.Errorf("%s is registered, but the source scan did not find it", mf.GetName())
		}
	}
	if seen == 0 {
		t.Error("no ipkeeper metric in controller-runtime's registry: does manager.RegisterMetrics still register them?")
	}
}

// metricRE: not after a "-", which makes it part of a file name such as
// the release's kubectl-ipkeeper_linux_amd64.tar.gz.
var metricRE = regexp.MustCompile(`(^|[^A-Za-z0-9_:-])(ipkeeper_[a-z0-9_]*)(\*?)`)

func TestDocsNameTheMetricsThatExist(t *testing.T) {
	names, kinds := codeMetrics(t)
	var p problems
	for _, d := range docs(t) {
		for i, line := range d.lines {
			for _, m := range metricRE.FindAllStringSubmatch(line, -1) {
				name, wildcard := m[2], m[3] == "*"
				if wildcard {
					found := false
					for n := range names {
						found = found || strings.HasPrefix(n, name)
					}
					if !found {
						p.add(d, i, "%s*: no metric has that prefix", name)
					}
					continue
				}
				if _, ok := names[name]; ok {
					continue
				}
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if k := kinds[base]; k == "HistogramOpts" || k == "SummaryOpts" {
					continue
				}
				p.add(d, i, "%s: no such metric in the code", name)
			}
		}
	}
	p.report(t, "metrics named in the docs that the code does not define")
}

func TestEveryMetricIsDocumented(t *testing.T) {
	names, _ := codeMetrics(t)
	text := allText(docs(t))
	var missing []string
	for name, file := range names {
		if !regexp.MustCompile(`(^|[^A-Za-z0-9_:])` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_])`).MatchString(text) {
			rel, _ := filepath.Rel(root(t), file)
			missing = append(missing, name+" ("+rel+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics no document names:\n  %s", strings.Join(missing, "\n  "))
	}
}

// --- the first build time ---

var buildTimeRE = regexp.MustCompile(`about\s+([a-z0-9-]+)\s+minutes\s+on\s+two\s+cores`)

// TestFirstBuildTimeAgrees: README.md, docs/development.md and the
// Makefile's demo text give one figure for the first build of the tools.
func TestFirstBuildTimeAgrees(t *testing.T) {
	r := root(t)
	figures := map[string][]string{}
	for _, rel := range []string{"README.md", "docs/development.md", "Makefile"} {
		ms := buildTimeRE.FindAllStringSubmatch(readDoc(t, r, rel).text(), -1)
		if len(ms) == 0 {
			t.Errorf("%s gives no first build time (%q)", rel, buildTimeRE.String())
		}
		for _, m := range ms {
			figures[m[1]] = append(figures[m[1]], rel)
		}
	}
	if len(figures) > 1 {
		t.Errorf("the first build time differs: %v", figures)
	}
}
