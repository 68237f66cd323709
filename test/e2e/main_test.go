// Package e2e holds the end-to-end tests: npl's binaries on the local
// cluster (real control plane, nodes and Pods as network namespaces, real
// iptables) with real TCP and UDP traffic.
package e2e

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }
