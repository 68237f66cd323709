// Package conformance runs the official Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version go.mod pins) against npl:
// the local cluster (test/harness/cluster, whose kubelet stand-in runs the
// suite's echo-basic backends in their HTTP, TCP, UDP and gRPC modes and a
// DNS server for its CoreDNS image), npl-agent on every node, and npl-lbsync
// with the Gateway API enabled and the haproxy provider serving the VIPs on
// the edge of test/harness/edgebed. `make test` runs the core tests of
// TestedProfiles and asserts the report against KnownFailures;
// `make conformance` runs every profile of Profiles whole and writes the
// official report (one report, one entry per profile) to docs/conformance/.
package conformance

import (
	"maps"
	"slices"

	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

// Profiles are the conformance profiles `make conformance` runs, whole, in
// one run whose report has an entry for each.
var Profiles = []suite.ConformanceProfileName{
	suite.GatewayHTTPConformanceProfileName,
	suite.GatewayTCPConformanceProfileName,
	suite.GatewayUDPConformanceProfileName,
	suite.GatewayTLSConformanceProfileName,
	suite.GatewayGRPCConformanceProfileName,
}

// TestedProfiles are the profiles whose core tests `make test` runs: every
// profile of Profiles whose core passes, but for KnownFailures.
var TestedProfiles = slices.Clone(Profiles)

// KnownFailures are the core tests of Profiles npl does not pass yet, by
// short name, each with its reason. `make test` skips them (the report lists
// them as skipped, with the reason above it) and requires every other core
// test of TestedProfiles to pass; `make conformance` requires every core
// test that fails to be listed. A test that passes again must leave the
// list. This is the only such list. It is empty: every core test of the
// five profiles passes with the Gateway controller (lbsync/gateway: HTTP,
// gRPC, TCP, UDP and TLS routes), HAProxy on the edge (HTTP, h2c, TCP, TLS
// passthrough and terminate) and npl-edge's nftables table (UDP).
var KnownFailures = map[string]string{}

// knownFailureNames returns the names of KnownFailures, sorted.
func knownFailureNames() []string { return slices.Sorted(maps.Keys(KnownFailures)) }
