package portalloc_test

import (
	"testing"

	"github.com/nodeportlocal/npl/internal/netnstest"
)

// TestMain runs the tests in a private network namespace (netnstest).
func TestMain(m *testing.M) { netnstest.Main(m) }

// requirePrivateNetNS fails the test unless it runs in that namespace.
func requirePrivateNetNS(t *testing.T) {
	t.Helper()
	netnstest.Require(t, "binds wildcard sockets")
}

// newNetNS creates another network namespace (netnstest.NewNetNS).
func newNetNS(t *testing.T) string { return netnstest.NewNetNS(t) }
