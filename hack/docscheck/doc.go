// SPDX-License-Identifier: Apache-2.0

// Package docscheck holds the tests that keep README.md and docs/ true to
// the code (make test-unit runs them; no control plane):
//
//   - binaries: every cmd/<name> the docs name exists, "N binaries" counts
//     them right, and each binary is named in README.md and docs/install.md;
//   - CRDs: every ipkeeper.io or k8s.cni.cncf.io CRD name, manifest kind and
//     kubectl resource the docs name is in manifests/crds, and each CRD there
//     is documented;
//   - flags: every --flag the docs name is a flag of ipkeeper-controller,
//     ipkeeper-agent or kubectl ipkeeper (read from the flag sets the
//     binaries parse with), or a listed flag of another tool; a flag table
//     under an "Agent flags" or "Controller flags" heading and a
//     "kubectl ipkeeper <command>" line name only that binary's or
//     command's flags; every flag of the daemons and the plugin is
//     documented;
//   - metrics: every ipkeeper_* metric the docs name is defined in the code
//     (the Name, Namespace and Subsystem of the prometheus *Opts literals,
//     and string literals that are whole ipkeeper_* names, as NewDesc
//     takes them; checked against controller-runtime's registry), and each
//     one defined is documented;
//   - the first build time of the pinned tools is the same figure in
//     README.md, docs/development.md and the Makefile.
//   - the code map: docs/development.md's "Code map" table has a row for
//     every Go package under cmd/, internal/, pkg/ and tests/, and the
//     section names no package that does not exist (make lint runs this
//     one too).
package docscheck
