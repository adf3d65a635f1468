// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// completionShells are the shells `completion` writes a script for.
var completionShells = []string{"bash", "zsh", "fish", "powershell"}

// completionCommand is `kubectl ipkeeper completion SHELL`: cobra's
// generators. The scripts complete the kubectl-ipkeeper binary; kubectl's
// own completion of `kubectl ipkeeper ...` runs kubectl_complete-ipkeeper
// (docs/cli.md), which asks this binary's __complete command.
func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh|fish|powershell",
		Short:     "Print the shell completion script of kubectl-ipkeeper.",
		ValidArgs: completionShells,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("completion takes one shell (bash, zsh, fish or powershell), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			out := c.OutOrStdout()
			var err error
			switch args[0] {
			case "bash":
				err = root.GenBashCompletionV2(out, true)
			case "zsh":
				err = root.GenZshCompletion(out)
			case "fish":
				err = root.GenFishCompletion(out, true)
			case "powershell":
				err = root.GenPowerShellCompletionWithDesc(out)
			default:
				return usageErrorf("completion: shell %q: want bash, zsh, fish or powershell", args[0])
			}
			if err != nil {
				return fmt.Errorf("writing the %s completion script: %w", args[0], err)
			}
			return nil
		},
	}
}
