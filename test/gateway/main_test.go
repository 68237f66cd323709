// Package gateway holds the tests of npl-lbsync's Gateway API on the bed of
// test/harness/lbsyncbed, by provider: the mock (mock_test.go; api_test.go
// first, before any test installs the CRDs), Avi (avi_test.go) and BIG-IP
// (bigip_test.go, bigip_streams_test.go) through their simulators, and every
// route kind (kinds_test.go). HAProxy's data plane of Gateway listeners is
// tested in test/haproxy, the official conformance suite in
// test/conformance.
package gateway

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// env is the bed with this package's own steps.
type env struct{ *lbsyncbed.Env }

func setup(t *testing.T) *env {
	t.Helper()
	return &env{lbsyncbed.Setup(t)}
}
