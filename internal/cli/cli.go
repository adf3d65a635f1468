// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
	// args checks the arguments before anything is read (nil: any).
	args func(args []string) error
	// complete offers the command's arguments to shell completion
	// (toComplete is the word being typed; the shell filters by it).
	complete func(ctx context.Context, s *session, args []string, toComplete string) ([]string, cobra.ShellCompDirective)
	// aliases are other names of the command; children its subcommands.
	aliases  []string
	children []command
}

// commands is the plugin's command table; a new subcommand is one more
// entry.
var commands = []command{
	whoHasCommand,
	whyCommand,
	poolsCommand,
	leaksCommand,
	importCommand,
	uninstallCommand,
}

// Streams are where a command writes.
type Streams struct {
	Out, Err io.Writer
}

// globalOptions are the flags every command has: kubectl's own connection
// flags (genericclioptions.ConfigFlags: --kubeconfig, --context, -n, --as,
// --token, --server, --request-timeout, ...) and -A; -o is each command's.
type globalOptions struct {
	config        *genericclioptions.ConfigFlags
	allNamespaces bool
}

func (o *globalOptions) addFlags(fs *pflag.FlagSet) {
	// No discovery cache: the plugin reads its own typed objects only.
	o.config = genericclioptions.NewConfigFlags(false)
	o.config.AddFlags(fs)
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "all namespaces")
}

// FlagSets returns every command's flags (the global ones included) by
// command name, as Main registers them; the docs check (hack/docscheck)
// lists them.
func FlagSets() map[string]*pflag.FlagSet {
	root := newRootCommand(context.Background(), Streams{Out: io.Discard, Err: io.Discard}, new(int))
	sets := make(map[string]*pflag.FlagSet, len(commands))
	for _, cmd := range commands {
		sub, _, err := root.Find([]string{cmd.name})
		if err != nil {
			panic(fmt.Sprintf("command %s is not in the tree: %v", cmd.name, err))
		}
		sub.InheritedFlags() // merges the root's persistent flags into sub.Flags()
		sets[cmd.name] = sub.Flags()
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
	output        output
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
	code := ExitOK
	root := newRootCommand(ctx, streams, &code)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return code
	}
	fmt.Fprintf(streams.Err, "error: %v\n", err)
	var ue *usageError
	if !errors.As(err, &ue) {
		return ExitError
	}
	if cmd != root {
		fmt.Fprintf(streams.Err, "See '%s --help'.\n", cmd.CommandPath())
	}
	return ExitUsage
}

// newRootCommand builds the command tree; a run that wants an exit code
// other than 0 without an error (none today but the bare root's) sets
// *code.
func newRootCommand(ctx context.Context, streams Streams, code *int) *cobra.Command {
	var g globalOptions
	root := &cobra.Command{
		Use:   "kubectl-ipkeeper",
		Short: "kubectl ipkeeper: what ipkeeper sees, joined for people.",
		// kubectl runs it as `kubectl ipkeeper`: help and errors say so.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ipkeeper"},
		Version:       version.Version,
		Args:          cobra.ArbitraryArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Unknown commands are usage errors (exit 2), which cobra's own
		// "unknown command" error does not say.
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				c.SetOut(streams.Err)
				_ = c.Usage()
				*code = ExitUsage
				return nil
			}
			return unknownCommand(c, args[0])
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// Without a shorthand: -v is kubectl's verbosity, not a version.
	root.Flags().Bool("version", false, "print the version")
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.SetContext(ctx)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	g.addFlags(root.PersistentFlags())
	for _, cmd := range commands {
		root.AddCommand(cmd.cobraCommand(&g, streams))
	}
	root.AddCommand(versionCommand(), completionCommand(root))
	return root
}

// unknownCommand is the error for `kubectl ipkeeper NAME` without a
// command NAME, with cobra's suggestions.
func unknownCommand(root *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if s := root.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageErrorf("%s: see 'kubectl ipkeeper --help'", msg)
}

// cobraCommand is the cobra command of cmd: its flags, -o, and a run that
// checks the command line before it builds the session.
func (cmd command) cobraCommand(g *globalOptions, streams Streams) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:     cmd.name + " " + cmd.synopsis,
		Short:   cmd.summary,
		Aliases: cmd.aliases,
		// Checked before the kubeconfig is loaded: a usage error is one
		// whatever the connection.
		Args: func(_ *cobra.Command, args []string) error {
			if cmd.args == nil {
				return nil
			}
			return cmd.args(args)
		},
	}
	run := cmd.setup(c.Flags())
	c.Flags().StringVarP(&out, "output", "o", "", "output format: "+strings.Join(cmd.formats, "|")+" (default: a table)")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formatNames(cmd.formats), cobra.ShellCompDirectiveNoSpace))
	c.RunE = func(c *cobra.Command, args []string) error {
		// "why pod", not "pod": the command as it is typed.
		o, err := parseOutput(strings.TrimPrefix(c.CommandPath(), c.Root().CommandPath()+" "), cmd.formats, out)
		if err != nil {
			return err
		}
		if g.allNamespaces && g.namespace() != "" {
			return usageErrorf("-A and -n %s exclude each other", g.namespace())
		}
		s, err := newSession(g, streams, o)
		if err != nil {
			return err
		}
		return run(c.Context(), s, args)
	}
	if cmd.complete != nil {
		c.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			s, err := newSession(g, streams, output{})
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			return cmd.complete(c.Context(), s, args, toComplete)
		}
	}
	for _, child := range cmd.children {
		c.AddCommand(child.cobraCommand(g, streams))
	}
	return c
}

// noArgs is the args check of a command that takes none.
func noArgs(name string) func(args []string) error {
	return func(args []string) error {
		if len(args) > 0 {
			return usageErrorf("%s takes no arguments, got %q", name, strings.Join(args, " "))
		}
		return nil
	}
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version.",
		Args:  func(_ *cobra.Command, args []string) error { return noArgs("version")(args) },
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), version.Version)
			return err
		},
	}
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
func newSession(g *globalOptions, streams Streams, o output) (*session, error) {
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
		output: o, now: time.Now,
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
