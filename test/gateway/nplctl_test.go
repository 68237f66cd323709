package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// nplctlPools runs `bin/nplctl pools -o json` with args.
var nplctlPools = lbsyncbed.NplctlPools

// dropMember writes a copy of the mock's state file to dst with the first
// member of pool (of any load balancer, listener or not) removed: a
// provider that drifted, for nplctl to compare with, that npl-lbsync does
// not see.
func dropMember(t *testing.T, src, dst, pool string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	dropped := false
	drop := func(p any) {
		m, ok := p.(map[string]any)
		if !ok || m["name"] != pool {
			return
		}
		if ms, ok := m["members"].([]any); ok && len(ms) > 0 {
			m["members"], dropped = ms[1:], true
		}
	}
	lbs, _ := st["loadBalancers"].([]any)
	for _, lb := range lbs {
		l, _ := lb.(map[string]any)
		ps, _ := l["pools"].([]any)
		for _, p := range ps {
			drop(p)
		}
		ls, _ := l["listeners"].([]any)
		for _, li := range ls {
			if m, ok := li.(map[string]any); ok {
				drop(m["pool"])
			}
		}
	}
	if !dropped {
		t.Fatalf("no member of pool %s in %s", pool, src)
	}
	out, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(fmt.Errorf("write the drifted state: %w", err))
	}
}
