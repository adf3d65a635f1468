// SPDX-License-Identifier: Apache-2.0

// Package cli is the kubectl-ipkeeper plugin: one file per command
// (who-has, why, pools, leaks, import, uninstall), each joining what an
// operator would otherwise join by hand: reservations, claims, pods, VMs,
// NADs, pools and events. Two write: `import whereabouts` (IPReservations
// and IPAMClaim status, never over anything that exists) and `uninstall`
// (it removes ipkeeper's finalizers once ipkeeper-controller is gone); the
// others only read.
//
// A command is a value in the commands table (cli.go): its name, a one-line
// summary, the flags of its own and a run function that gets the parsed
// arguments and a session (clients, namespace, output format). Main makes
// a cobra command of each (cobra parses the flags and completes them);
// a command prints a printable (output.go): the rows -o json prints, the
// objects -o name names and its table, and cli-runtime's printers do the
// other formats. A new subcommand adds a file with its command and one
// line to that table; the global flags, exit codes and printing come with
// the session.
package cli
