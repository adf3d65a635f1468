// SPDX-License-Identifier: Apache-2.0

// Package version carries the build version, set by the linker
// (-X github.com/ipkeeper/ipkeeper/internal/version.Version=...).
package version

// Version is the ipkeeper release or git description of the build.
var Version = "dev"
