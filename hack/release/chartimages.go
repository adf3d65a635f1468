// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"go.yaml.in/yaml/v3"
)

// imagesAnnotation is the Chart.yaml annotation Artifact Hub lists a
// chart's images from (and scans them for vulnerabilities).
const imagesAnnotation = "artifacthub.io/images"

// chartImage is one entry of imagesAnnotation.
type chartImage struct {
	Name        string `yaml:"name"`
	Image       string `yaml:"image"`
	Whitelisted bool   `yaml:"whitelisted,omitempty"`
}

// pinChartImages sets every image of Chart.yaml's imagesAnnotation to
// the pinned digest, so that Artifact Hub shows and scans the image the
// packaged chart runs, not the tag of the chart's sources. The annotation
// is rewritten in place, the rest of the file (comments included) kept.
func pinChartImages(in []byte, pinned name.Digest) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(in, &doc); err != nil {
		return nil, fmt.Errorf("reading YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("want a YAML mapping")
	}
	_, annotations := mappingEntry(doc.Content[0], "annotations")
	if annotations == nil {
		return in, nil
	}
	_, images := mappingEntry(annotations, imagesAnnotation)
	if images == nil {
		return in, nil
	}
	var list []chartImage
	if err := yaml.Unmarshal([]byte(images.Value), &list); err != nil {
		return nil, fmt.Errorf("annotations.%s: %w", imagesAnnotation, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("annotations.%s lists no image", imagesAnnotation)
	}
	for i := range list {
		list[i].Image = pinned.String()
	}
	value, err := yaml.Marshal(list)
	if err != nil {
		return nil, err
	}
	return replaceBlock(in, images, string(value))
}

// replaceBlock replaces the lines of the literal block scalar n (the
// lines after its "|" indicator, as far as they are indented deeper than
// its key) with value, indented as the first of them was.
func replaceBlock(in []byte, n *yaml.Node, value string) ([]byte, error) {
	if n.Style != yaml.LiteralStyle {
		return nil, fmt.Errorf("line %d: annotations.%s is not a literal block (|)", n.Line, imagesAnnotation)
	}
	lines := strings.Split(string(in), "\n")
	first := n.Line // the line after the indicator's, 0-based
	if first >= len(lines) {
		return nil, fmt.Errorf("line %d: the block ends the file", n.Line)
	}
	indent := lines[first][:len(lines[first])-len(strings.TrimLeft(lines[first], " "))]
	end := first
	for end < len(lines) && (strings.HasPrefix(lines[end], indent) || strings.TrimSpace(lines[end]) == "") {
		end++
	}
	for end > first && strings.TrimSpace(lines[end-1]) == "" {
		end--
	}
	var block []string
	for _, l := range strings.Split(strings.TrimRight(value, "\n"), "\n") {
		block = append(block, indent+l)
	}
	out := append(append(append([]string{}, lines[:first]...), block...), lines[end:]...)
	return []byte(strings.Join(out, "\n")), nil
}

// checkChartImages reports whether the packaged chart's Chart.yaml (helm
// show chart) lists only the pinned image.
func checkChartImages(chartYAML []byte, pinned name.Digest) error {
	var chart struct {
		Annotations map[string]string `yaml:"annotations"`
	}
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil {
		return fmt.Errorf("reading the packaged Chart.yaml: %w", err)
	}
	v, ok := chart.Annotations[imagesAnnotation]
	if !ok {
		return nil
	}
	var list []chartImage
	if err := yaml.Unmarshal([]byte(v), &list); err != nil {
		return fmt.Errorf("the packaged Chart.yaml's annotations.%s: %w", imagesAnnotation, err)
	}
	for _, img := range list {
		if img.Image != pinned.String() {
			return fmt.Errorf("the packaged Chart.yaml's annotations.%s lists %s %q, not %s", imagesAnnotation, img.Name, img.Image, pinned)
		}
	}
	return nil
}
