// SPDX-License-Identifier: Apache-2.0

package iprange_test

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// parseRange builds the Range that ipamconfig.Parse makes of an ipam
// object, so tests exercise ranges as configured.
func parseRange(t testing.TB, ipam string) iprange.Range {
	t.Helper()
	cfg, err := ipamconfig.Parse([]byte(`{"name":"test","ipam":` + ipam + `}`))
	if err != nil {
		t.Fatalf("Parse(%s): %v", ipam, err)
	}
	return cfg.Ranges[0]
}
