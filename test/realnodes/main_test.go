package realnodes

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// TestMain runs the tests inside private namespaces, where the real-node
// cluster starts; it needs root.
func TestMain(m *testing.M) { cluster.RunMain(m) }
