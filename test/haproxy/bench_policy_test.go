package haproxy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// BenchmarkEdge_persistenceLatency measures what persistence costs a
// request through the VIP, in the same run: four load balancers on one
// edge over the same 4 backends, a TCP one without policy and one with
// source persistence (a stick table lookup per connection), an HTTP one
// without policy and one with cookie persistence (each client returns the
// cookie it got). Each iteration sends 2000 requests to each, 4 clients at
// a time, a new connection each, the modes in turn; it reports each mode's
// latency p50/p99 and requests per second, the failed requests and the
// 1-minute load average at the end.
func BenchmarkEdge_persistenceLatency(b *testing.B) {
	const requests, workers = 2000, 4
	bed, bs := newBed(b)
	p, err := bed.OpenProvider(context.Background(), testCluster, bed.ProviderSection(testCluster))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var members []lbmodel.Member
	for _, name := range []string{"web-0", "web-1", "web-2", "web-3"} {
		port, err := bs.StartBackend(name)
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, lbmodel.Member{IP: bs.IP.String(), Port: port, Enabled: true})
	}
	source := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600}}
	cookie := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "bench-session"}}
	lbs := map[string]*lbmodel.LoadBalancer{"tcp": model("tcp", 80, members), "tcp-source": model("tcp-source", 80, members),
		"http": l7Model("http", members, nil), "http-cookie": l7Model("http-cookie", members, cookie)}
	lbs["tcp-source"].Listeners[0].Pool.Policy = source
	modes := []string{"tcp", "tcp-source", "http", "http-cookie"}
	urls := map[string]string{}
	for _, mode := range modes {
		st, err := p.Ensure(ctx, lbs[mode])
		if err != nil {
			b.Fatal(err)
		}
		pool := lbs[mode].Name + "-TCP-80"
		if lbs[mode].IsL7() {
			pool = lbs[mode].Pools[0].Name
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = bed.Edges[0].WaitUp(wctx, pool, len(members))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		urls[mode] = edgebed.URL(st.VIPs[0], 80)
	}
	lat := map[string][]time.Duration{}
	elapsed := map[string]time.Duration{}
	failed := 0
	c := bed.ClientHTTP(3 * time.Second)
	b.ResetTimer()
	for range b.N {
		for _, mode := range modes {
			jars := make([]map[string]string, workers)
			l, d, f := timeRequests(requests, workers, func(w int) error {
				if mode != "http-cookie" {
					_, err := edgebed.Get(ctx, c, urls[mode])
					return err
				}
				if jars[w] == nil {
					jars[w] = map[string]string{}
				}
				_, err := cookieGet(ctx, c, urls[mode], jars[w])
				return err
			})
			lat[mode], elapsed[mode], failed = append(lat[mode], l...), elapsed[mode]+d, failed+f
		}
	}
	b.StopTimer()
	for _, mode := range modes {
		slices.Sort(lat[mode])
		b.ReportMetric(edgebed.Percentile(lat[mode], 50), mode+"-p50-ms")
		b.ReportMetric(edgebed.Percentile(lat[mode], 99), mode+"-p99-ms")
		b.ReportMetric(float64(len(lat[mode]))/elapsed[mode].Seconds(), mode+"-req/s")
	}
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(edgebed.LoadAverage(), "load1")
}
