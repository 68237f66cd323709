// Package conformance runs the official Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version go.mod pins) against npl:
// the local cluster (test/harness/cluster, whose kubelet stand-in runs the
// suite's echo-basic backends in their HTTP, TCP, UDP and gRPC modes and a
// DNS server for its CoreDNS image), npl-agent on every node, and npl-lbsync
// with the Gateway API enabled and the haproxy provider serving the VIPs on
// the edge of test/harness/edgebed, on the Gateway API CRDs of the
// experimental channel (the report's gatewayAPIChannel), whose fields the
// tests of experimental features npl announces need. `make test` and `make conformance` run
// every profile of Profiles whole and require the results to be those of
// the committed report, the failing core tests to be KnownFailures;
// `make conformance` writes the official report (one report, one entry per
// profile) to docs/conformance/, to be committed.
package conformance

import (
	"maps"
	"slices"

	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

// Profiles are the conformance profiles `make test` and `make conformance`
// run, whole, in one run whose report has an entry for each.
var Profiles = []suite.ConformanceProfileName{
	suite.GatewayHTTPConformanceProfileName,
	suite.GatewayTCPConformanceProfileName,
	suite.GatewayUDPConformanceProfileName,
	suite.GatewayTLSConformanceProfileName,
	suite.GatewayGRPCConformanceProfileName,
}

// TestedProfiles are the profiles whose core tests the quicker run of
// -npl.core runs: every profile of Profiles whose core passes, but for
// KnownFailures.
var TestedProfiles = slices.Clone(Profiles)

// KnownFailures are the core tests of Profiles npl does not pass yet, by
// short name, each with its reason. A run requires every core test that
// fails to be listed (the report has the reason above it); -npl.core skips
// them and requires every other core test of TestedProfiles to pass. A test that passes again must leave the
// list. This is the only such list. It is empty: every core test of the
// five profiles passes with the Gateway controller (lbsync/gateway: HTTP,
// gRPC, TCP, UDP and TLS routes), HAProxy on the edge (HTTP, h2c, TCP, TLS
// passthrough and terminate) and npl-edge's nftables table (UDP).
var KnownFailures = map[string]string{}

// knownFailureNames returns the names of KnownFailures, sorted.
func knownFailureNames() []string { return slices.Sorted(maps.Keys(KnownFailures)) }
