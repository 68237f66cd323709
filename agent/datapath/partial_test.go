package datapath_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestIPTables_syncWritesOnlyTheDifferenceUntilDrift: after a whole write,
// a Sync writes only the deleted and added rules (a rule appended by hand
// survives it, which a whole write would flush); once Check has seen drift,
// the next Sync writes the chains whole again.
func TestIPTables_syncWritesOnlyTheDifferenceUntilDrift(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ipt := newIPTables(t, v4, mode)
			ctx := context.Background()
			if err := ipt.Sync(ctx, desired(5)); err != nil {
				t.Fatal(err)
			}
			run(t, command(v4, mode, ""), "-t", "nat", "-A", "NPL-NODE-PORT-LOCAL", "-j", "RETURN")
			next := desired(6)
			next.Mappings = next.Mappings[1:]
			restores := ipt.Stats().Writes
			if err := ipt.Sync(ctx, next); err != nil {
				t.Fatal(err)
			}
			if got := ipt.Stats().Writes - restores; got != 1 {
				t.Errorf("restores for a partial write = %d, want 1", got)
			}
			lines := nplLines(t, v4, mode)
			if !slices.Contains(lines, "-A NPL-NODE-PORT-LOCAL -j RETURN") {
				t.Fatalf("the hand-added rule is gone: the Sync wrote the chain whole\n%s", strings.Join(lines, "\n"))
			}
			for _, r := range renderedRules(v4, next) {
				if !slices.Contains(lines, r) {
					t.Errorf("rule missing after the partial write: %s", r)
				}
			}
			if drift, err := ipt.Check(ctx, next); err != nil || !drift {
				t.Fatalf("Check = %v, %v; want drift (the hand-added rule)", drift, err)
			}
			if err := ipt.Sync(ctx, next); err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(jumpLines), renderedRules(v4, next)...)
			got := nplLines(t, v4, mode)
			slices.Sort(want)
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("after drift, a whole write (-want +got):\n%s", diff)
			}
			assertNoDrift(t, ipt, next)
		})
	}
}
