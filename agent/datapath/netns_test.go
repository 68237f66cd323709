package datapath_test

import (
	"testing"

	"github.com/nodeportlocal/npl/internal/netnstest"
)

// TestMain runs the tests in a private network namespace (netnstest).
func TestMain(m *testing.M) {
	netnstest.Main(m, "iptables", "ip6tables", "iptables-restore", "iptables-save", "nft", "conntrack", "nsenter")
}

// requirePrivateNetNS fails the test unless it runs in that namespace.
func requirePrivateNetNS(t testing.TB) {
	t.Helper()
	netnstest.Require(t, "programs iptables and nftables")
}

// newNetNS creates another network namespace (netnstest.NewNetNS).
func newNetNS(t testing.TB) string { return netnstest.NewNetNS(t) }
