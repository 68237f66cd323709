package gateway

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// nplctlPools runs `bin/nplctl pools -o json` with args.
var nplctlPools = lbsyncbed.NplctlPools

// dropMember writes a copy of the mock's state file to dst with the first
// member of pool (of any load balancer, listener or not) removed.
func dropMember(t *testing.T, src, dst, pool string) {
	t.Helper()
	lbsyncbed.EditMockState(t, src, dst, func(p map[string]any) bool {
		ms, ok := p["members"].([]any)
		if p["name"] != pool || !ok || len(ms) == 0 {
			return false
		}
		p["members"] = ms[1:]
		return true
	})
}
