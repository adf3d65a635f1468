// Command ipkeeper-agent will run on every node: it installs the ipkeeper CNI
// binary and serves its requests on a root-only unix socket.
// Until those land it only parses its flags and reports that it has nothing
// to run, so that no manifest can mistake it for a working controller.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/ipkeeper/ipkeeper/pkg/version"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("ipkeeper-agent", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Println(version.Version)
		return 0
	}
	fmt.Fprintln(os.Stderr, "ipkeeper-agent "+version.Version+": the node agent is not implemented yet; nothing to run")
	return 0
}
