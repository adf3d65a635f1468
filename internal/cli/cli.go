// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/version"
	ipkscheme "github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// Exit codes, as kubectl uses them: an object that is not there (kubectl
// get's NotFound) is an error like any other.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Output formats of -o; "" is the table.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// runFunc runs a command with its arguments (flags removed).
type runFunc func(ctx context.Context, s *session, args []string) error

// command is one subcommand. setup registers the command's own flags and
// returns the function that runs it, which reads them.
type command struct {
	name     string
	synopsis string
	summary  string
	// formats are the -o values the command accepts besides the table.
	formats []string
	setup   func(fs *pflag.FlagSet) runFunc
}

// commands is the plugin's command table; a new subcommand is one more
// entry.
var commands = []command{
	whoHasCommand,
	whyCommand,
	poolsCommand,
	leaksCommand,
	importCommand,
}

// Streams are where a command writes.
type Streams struct {
	Out, Err io.Writer
}

// globalOptions are the flags every command has: kubectl's own connection
// flags (genericclioptions.ConfigFlags: --kubeconfig, --context, -n, --as,
// --token, --server, --request-timeout, ...), -A and -o.
type globalOptions struct {
	config        *genericclioptions.ConfigFlags
	allNamespaces bool
	output        string
}

func (o *globalOptions) addFlags(fs *pflag.FlagSet, formats []string) {
	// No discovery cache: the plugin reads its own typed objects only.
	o.config = genericclioptions.NewConfigFlags(false)
	o.config.AddFlags(fs)
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "all namespaces")
	if len(formats) > 0 {
		fs.StringVarP(&o.output, "output", "o", "", "output format: "+strings.Join(formats, "|")+" (default: a table)")
	}
}

// flagSet registers the command's flags, the global ones into g, on a new
// flag set, and returns it with the function that runs the command.
func (cmd command) flagSet(g *globalOptions) (*pflag.FlagSet, runFunc) {
	fs := pflag.NewFlagSet("kubectl ipkeeper "+cmd.name, pflag.ContinueOnError)
	g.addFlags(fs, cmd.formats)
	return fs, cmd.setup(fs)
}

// FlagSets returns every command's flags (the global ones included) by
// command name, as Main registers them; the docs check (hack/docscheck)
// lists them.
func FlagSets() map[string]*pflag.FlagSet {
	sets := make(map[string]*pflag.FlagSet, len(commands))
	for _, cmd := range commands {
		sets[cmd.name], _ = cmd.flagSet(&globalOptions{})
	}
	return sets
}

// session is what a command works with.
type session struct {
	out, errOut io.Writer
	client      client.Client
	// namespace is -n, else the context's namespace, else "default".
	namespace string
	// namespaceSet is true when -n was given: cluster-wide listings then
	// narrow to owners in that namespace.
	namespaceSet  bool
	allNamespaces bool
	output        string
	now           func() time.Time
}

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Main runs the plugin with args (without the program name) and returns
// the exit code.
func Main(ctx context.Context, args []string, streams Streams) int {
	if len(args) == 0 {
		printUsage(streams.Err)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		printUsage(streams.Out)
		return ExitOK
	case "--version", "version":
		fmt.Fprintln(streams.Out, version.Version)
		return ExitOK
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(streams.Err, "error: unknown command %q\n\n", args[0])
		printUsage(streams.Err)
		return ExitUsage
	}
	var g globalOptions
	fs, run := cmd.flagSet(&g)
	fs.SetOutput(streams.Err)
	// pflag prints the usage itself on every parse error; the help goes
	// to stdout on --help only, errors get one line and a pointer to it.
	fs.Usage = func() {}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(streams.Out, "%s\n\nUsage:\n  kubectl ipkeeper %s %s\n\nFlags:\n%s", cmd.summary, cmd.name, cmd.synopsis, fs.FlagUsages())
			return ExitOK
		}
		fmt.Fprintf(streams.Err, "error: %v\nSee 'kubectl ipkeeper %s --help'.\n", err, cmd.name)
		return ExitUsage
	}
	if g.output != outputTable && !slices.Contains(cmd.formats, g.output) {
		fmt.Fprintf(streams.Err, "error: -o %q: %s accepts %s\n", g.output, cmd.name, strings.Join(cmd.formats, ", "))
		return ExitUsage
	}
	if g.allNamespaces && g.namespace() != "" {
		fmt.Fprintf(streams.Err, "error: -A and -n %s exclude each other\n", g.namespace())
		return ExitUsage
	}
	s, err := newSession(g, streams)
	if err != nil {
		fmt.Fprintf(streams.Err, "error: %v\n", err)
		return ExitError
	}
	if err := run(ctx, s, fs.Args()); err != nil {
		fmt.Fprintf(streams.Err, "error: %v\n", err)
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(streams.Err, "See 'kubectl ipkeeper %s --help'.\n", cmd.name)
			return ExitUsage
		}
		return ExitError
	}
	return ExitOK
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "kubectl ipkeeper: what ipkeeper sees, joined for people.\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nUse 'kubectl ipkeeper <command> --help' for a command's flags, --version for the version.\n")
}

// namespace is -n as given, "" without it.
func (o *globalOptions) namespace() string {
	if o.config == nil || o.config.Namespace == nil {
		return ""
	}
	return *o.config.Namespace
}

// newSession loads the kubeconfig the way kubectl does (--kubeconfig,
// else $KUBECONFIG, else ~/.kube/config; the connection flags override
// it) and builds a client.
func newSession(g globalOptions, streams Streams) (*session, error) {
	loader := g.config.ToRawKubeConfigLoader()
	cfg, err := g.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-ipkeeper/" + version.Version
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the namespace of the kubeconfig context: %w", err)
	}
	scheme, err := ipkscheme.New()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client for %s: %w", cfg.Host, err)
	}
	return &session{
		out: streams.Out, errOut: streams.Err, client: c,
		namespace: ns, namespaceSet: g.namespace() != "", allNamespaces: g.allNamespaces,
		output: g.output, now: time.Now,
	}, nil
}

// ownerNamespace is the owner namespace cluster-wide listings keep: the
// one given with -n, else all ("").
func (s *session) ownerNamespace() string {
	if s.namespaceSet {
		return s.namespace
	}
	return ""
}
