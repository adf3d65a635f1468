// SPDX-License-Identifier: Apache-2.0

package ipamconfig

import (
	"encoding/json"
	"errors"
	"reflect"

	"github.com/containernetworking/cni/pkg/types"
)

// The raw* types mirror the JSON. Only keys ipkeeper uses are declared;
// their JSON tags are also the list of known keys (keys.go): any other
// key is ignored and told (Config.IgnoredKeys, Config.UnknownKeys).

type rawConf struct {
	Name               string    `json:"name"`
	CNIVersion         string    `json:"cniVersion"`
	AllowPersistentIPs bool      `json:"allowPersistentIPs"`
	IPAM               *rawIPAM  `json:"ipam"`
	RuntimeConfig      rawIPList `json:"runtimeConfig"`
	Args               struct {
		CNI rawArgsCNI `json:"cni"`
	} `json:"args"`
}

// rawArgsCNI is args.cni. Its values are typed so a wrong JSON type is
// reported by key and type, not rendered as a Go value.
type rawArgsCNI struct {
	IPs            []string `json:"ips"`
	ClaimReference string   `json:"ipam-claim-reference"`
}

type rawIPList struct {
	IPs []string `json:"ips"`
	// MAC is runtimeConfig.mac (the CNI "mac" capability Multus fills
	// when a NAD declares it).
	MAC string `json:"mac"`
}

type rawIPAM struct {
	Type string `json:"type"`
	Pool string `json:"pool"`
	// NetworkName is whereabouts' network_name, which keeps apart pools
	// of overlapping ranges; ipkeeper reads it for the same purpose.
	NetworkName string `json:"network_name"`
	// StickyMAC is ipkeeper's sticky_mac: an attachment presenting the
	// MAC of an address released in its namespace, still cooling down,
	// gets that address back.
	StickyMAC  bool       `json:"sticky_mac"`
	Range      string     `json:"range"`
	RangeStart string     `json:"range_start"`
	RangeEnd   string     `json:"range_end"`
	Exclude    []string   `json:"exclude"`
	Gateway    string     `json:"gateway"`
	IPRanges   []rawRange `json:"ipRanges"`
	Routes     []rawRoute `json:"routes"`
	DNS        types.DNS  `json:"dns"`
}

// rawRange is one ipam.ipRanges entry. Gateway is an ipkeeper extension so
// each family of a dual-stack network can carry its own gateway.
type rawRange struct {
	Range      string   `json:"range"`
	RangeStart string   `json:"range_start"`
	RangeEnd   string   `json:"range_end"`
	Exclude    []string `json:"exclude"`
	Gateway    string   `json:"gateway"`
}

// rawRoute is decoded by hand rather than as types.Route so a bad dst or gw
// yields an error that names the route.
type rawRoute struct {
	Dst      string `json:"dst"`
	GW       string `json:"gw"`
	MTU      int    `json:"mtu"`
	AdvMSS   int    `json:"advmss"`
	Priority int    `json:"priority"`
	Table    *int   `json:"table"`
	Scope    *int   `json:"scope"`
}

func decode(data []byte) (*rawConf, error) {
	var rc rawConf
	if err := json.Unmarshal(data, &rc); err != nil {
		return nil, decodeErr(err)
	}
	return &rc, nil
}

// decodeErr turns encoding/json errors into FieldErrors naming the key.
func decodeErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "config"
		}
		return causedErr(err, field, ": expected %s, got JSON %s", jsonKind(te.Type), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return causedErr(err, "config", ": invalid JSON at byte %d: %s", se.Offset, se.Error())
	}
	return causedErr(err, "config", ": invalid JSON: %s", err.Error())
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}
