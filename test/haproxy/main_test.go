// Package haproxy holds the tests of the haproxy provider through npl-edge
// and a real HAProxy, with traffic through the VIP, on the bed of
// test/harness/edgebed: the provider and npl-edge alone against backends in
// the test's namespace (edge_test.go, attach_test.go, health_test.go,
// udp_test.go, and the Gateway listeners' data plane in gateway_test.go and
// gateway_streams_test.go); end to end on the local cluster with npl-agent
// on every node and npl-lbsync (e2e_*_test.go); and the benchmarks through
// the VIP (bench_*_test.go).
package haproxy

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }
