// SPDX-License-Identifier: Apache-2.0

package cnishim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// Main runs the plugin: skel.PluginMainFuncs with the production
// callbacks, after one check of its own. skel reads a configuration
// without cniVersion as the legacy version 0.1.0 and answers
// `config is "0.1.0"`, naming a version nobody wrote; Main says instead
// that cniVersion is missing and which versions to write.
func Main(about string) {
	switch os.Getenv("CNI_COMMAND") {
	case "ADD", "DEL", "CHECK", "GC", "STATUS":
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			exit(types.NewError(types.ErrIOFailure, fmt.Sprintf("ipkeeper: reading the network configuration from stdin: %v", err), ""))
		}
		if err := requireCNIVersion(data); err != nil {
			exit(err)
		}
		// skel reads os.Stdin itself: hand it the same bytes again.
		if err := replayStdin(data); err != nil {
			exit(types.NewError(types.ErrIOFailure, fmt.Sprintf("ipkeeper: %v", err), ""))
		}
	}
	skel.PluginMainFuncs(Funcs(), VersionInfo(), about)
}

// requireCNIVersion refuses a configuration without cniVersion. Invalid
// JSON is left to skel, which reports it.
func requireCNIVersion(stdin []byte) *types.Error {
	var conf struct {
		CNIVersion *string `json:"cniVersion"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil
	}
	if conf.CNIVersion != nil && *conf.CNIVersion != "" {
		return nil
	}
	quoted := make([]string, 0, 4)
	for _, v := range VersionInfo().SupportedVersions() {
		quoted = append(quoted, fmt.Sprintf("%q", v))
	}
	return types.NewError(types.ErrInvalidNetworkConfig,
		"ipkeeper: cniVersion is missing from the network configuration; set it to a version ipkeeper supports: "+strings.Join(quoted, ", "), "")
}

// replayStdin makes os.Stdin yield data again.
func replayStdin(data []byte) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("replaying stdin: %w", err)
	}
	go func() {
		// A write error means the reader is gone; skel then reports what it read.
		_, _ = w.Write(data)
		_ = w.Close()
	}()
	os.Stdin = r
	return nil
}

// exit prints a CNI error the way skel does and ends the process.
func exit(e *types.Error) {
	if err := e.Print(); err != nil {
		fmt.Fprintf(os.Stderr, "ipkeeper: writing error: %v\n", err)
	}
	os.Exit(1)
}
