// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/cli"
)

// kubectl's connection flags reach the API server: --as impersonates
// (the admin kubeconfig may impersonate anyone), so a user without RBAC
// gets the API server's forbidden error naming that user, and the same
// user in system:masters (--as-group) reads.
func TestCLIConnectionFlags(t *testing.T) {
	const nobody = "ipkeeper-cli-nobody"
	runCLICases(t, []cliCase{
		{name: "as a user without RBAC", args: []string{"pools", "--as", nobody}, code: cli.ExitError,
			stderr: []string{"forbidden", `User "` + nobody + `" cannot list resource "ippools"`}},
		{name: "as the user in system:masters", args: []string{"pools", "--as", nobody, "--as-group", "system:masters"}, code: cli.ExitOK},
		{name: "as-group without as", args: []string{"pools", "--as-group", "system:masters"}, code: cli.ExitError,
			stderr: []string{"impersonat"}},
	})
}
