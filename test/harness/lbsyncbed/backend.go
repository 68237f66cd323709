package lbsyncbed

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// BackendState is what a take-over or a restart must not change: the count
// of writes the load balancer received (simulators), its objects'
// identities (Avi), its pools and VIPs.
type BackendState struct {
	lbName     string
	writes     int
	identities map[string]string
	pools      map[string][]lbmodel.Member
	vips       []string
}

// Snapshot reads the BackendState of a load balancer.
func Snapshot(t *testing.T, backend stack.Backend, lbName string) BackendState {
	t.Helper()
	st := BackendState{writes: backend.Writes()}
	if id, ok := backend.(stack.Identified); ok {
		st.identities = id.Identities(lbName)
		if len(st.identities) == 0 {
			t.Fatalf("no object of %s on the %s simulator", lbName, backend.Name())
		}
	}
	var ok bool
	var err error
	if st.pools, st.vips, ok, err = backend.Pools(lbName); err != nil || !ok {
		t.Fatalf("read the load balancer %s: ok %v, err %v", lbName, ok, err)
	}
	st.lbName = lbName
	return st
}

// Unchanged checks that the new leader, whose first sync is done, called
// the provider but wrote and deleted nothing.
func (st BackendState) Unchanged(t *testing.T, backend stack.Backend, leader *Syncer, what string) {
	t.Helper()
	ensures, err := leader.Count("npl_lbsync_provider_calls_total", `verb="ensure"`)
	if err != nil || ensures == 0 {
		t.Errorf("%s: the new leader made %v Ensure calls (err %v), want at least one", what, ensures, err)
	}
	if backend.Name() == "mock" {
		// The mock counts the calls of the process it runs in.
		c, err := leader.MockState()
		if err != nil {
			t.Fatalf("%s: read the mock's counters: %v", what, err)
		}
		if c.Counters.Writes != 0 || c.Counters.Delete != 0 || c.Counters.Ensure == 0 {
			t.Errorf("%s: mock counters %+v, want Ensures but 0 writes and 0 deletes", what, c.Counters)
		}
	} else if got := backend.Writes(); got != st.writes {
		t.Errorf("%s: %d writes to the %s simulator, want 0", what, got-st.writes, backend.Name())
	}
	if id, ok := backend.(stack.Identified); ok {
		if got := id.Identities(st.lbName); !cmp.Equal(got, st.identities) {
			t.Errorf("%s: objects re-created (-before +after):\n%s", what, cmp.Diff(st.identities, got))
		}
	}
	pools, vips, ok, err := backend.Pools(st.lbName)
	if err != nil || !ok || !cmp.Equal(pools, st.pools) || !cmp.Equal(vips, st.vips) {
		t.Errorf("%s: load balancer changed: pools %v VIPs %v (ok %v, err %v), before %v %v", what, pools, vips, ok, err, st.pools, st.vips)
	}
}
