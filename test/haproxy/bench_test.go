package haproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// BenchmarkEdge_memberChange measures a membership change from the
// provider's Ensure to HAProxy's runtime API having applied it (the edge
// answers only then), through the real npl-edge and HAProxy: 100 changes
// per iteration (a member drained, re-enabled, removed, added back) on a
// pool of 10, reported as p50 and p99, with the number of reloads they
// caused (want 0).
func BenchmarkEdge_memberChange(b *testing.B) {
	bin, err := cluster.DefaultBinDir()
	if err != nil {
		b.Fatal(err)
	}
	if d := os.Getenv("NPL_BIN_DIR"); d != "" {
		bin = d
	}
	ctx := context.Background()
	bed, err := edgebed.Start(ctx, b.TempDir(), edgebed.Options{BridgeIP: bridgeIP, EdgeIP: netip.MustParseAddr("198.18.2.2"),
		ClientIP: netip.MustParseAddr("198.18.2.3"), BinDir: bin, Name: "b"})
	if err != nil {
		b.Fatal(err)
	}
	defer bed.Close()
	if err := bed.StartEdge(ctx); err != nil {
		b.Fatal(err)
	}
	p, err := bed.OpenProvider(ctx, testCluster, bed.ProviderSection(testCluster))
	if err != nil {
		b.Fatal(err)
	}
	bs := &edgebed.Backends{IP: bridgeIP}
	defer bs.Close()
	var members []lbmodel.Member
	for i := range 10 {
		port, err := bs.StartBackend(fmt.Sprintf("m%d", i))
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, lbmodel.Member{IP: bridgeIP.String(), Port: port, Enabled: true})
	}
	if _, err := p.Ensure(ctx, model("bench", 80, members)); err != nil {
		b.Fatal(err)
	}
	before, err := bed.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	const changes = 100
	var all []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := range changes {
			ms := slices.Clone(members)
			switch k := i % 4; k {
			case 0: // drain one
				ms[i%10].Enabled = false
			case 1: // enabled again
			case 2: // removed
				ms = slices.Delete(ms, i%10, i%10+1)
			case 3: // added back
			}
			start := time.Now()
			if _, err := p.Ensure(ctx, model("bench", 80, ms)); err != nil {
				b.Fatal(err)
			}
			all = append(all, time.Since(start))
		}
	}
	b.StopTimer()
	after, err := bed.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(after.Reloads-before.Reloads), "reloads")
}
