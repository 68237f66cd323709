// Package agent holds npl-agent's end-to-end tests: the binary on every node
// of the local cluster (real control plane, nodes and Pods as network
// namespaces, real iptables and nftables) with real TCP and UDP traffic, for
// each datapath backend, on IPv4 and dual-stack clusters. On the same agents
// run the tests of npl-lbsync fed by real annotations (lbsync_*_test.go:
// Services on the mock, Avi and BIG-IP, Ingress, rolling updates behind the
// readiness gate, nplctl), since they need this bed; npl-lbsync alone, on
// hand-written annotations, is tested in test/lbsync.
package agent

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }
