// Package lbsync holds npl-lbsync's tests of Services on the bed of
// test/harness/lbsyncbed: the real binary on the local cluster with the mock
// provider and no agent, the Pods' annotations written by hand (also in
// Antrea's own format), the exact pools, status, conditions and provider
// calls asserted; NodePort and ClusterIP modes, leader hand-over, faults,
// readiness gates and uninstall. Its Gateway API is tested in test/gateway;
// npl-lbsync fed by real agents in test/agent (lbsync_*_test.go).
package lbsync

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }
