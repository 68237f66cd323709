package avi

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

// benchLBs returns n load balancers of two listeners each, TCP with three
// members and UDP with one.
func benchLBs(n int) []*lbmodel.LoadBalancer {
	lbs := make([]*lbmodel.LoadBalancer, n)
	for i := range lbs {
		port := int32(61000 + i%1000)
		lbs[i] = webLB(fmt.Sprintf("svc-%04d", i),
			tcp(80, member("198.18.0.11", port), member("198.18.0.12", port), member("198.18.0.13", port)),
			udp(53, member("198.18.0.11", port)))
	}
	return lbs
}

// calls counts every request the simulator served.
func calls(sim *avisim.Server) int {
	n := 0
	for _, c := range sim.Calls() {
		n += c
	}
	return n
}

func benchFixture(b *testing.B) *fixture {
	// 1000 VIPs do not fit the default /24.
	return newFixture(b, fixtureOptions{sim: avisim.Options{VIPSubnet: netip.MustParsePrefix("198.18.192.0/20")}})
}

// BenchmarkEnsure1000 measures the provider through the alb-sdk against the
// simulator: 1000 load balancers created from nothing, then one membership
// change, an Ensure with no change, and a List of all 1000.
func BenchmarkEnsure1000(b *testing.B) {
	const n = 1000
	lbs := benchLBs(n)
	ctx := context.Background()

	b.Run("cold", func(b *testing.B) {
		var writes, requests int
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			f := benchFixture(b)
			b.StartTimer()
			for _, lb := range lbs {
				if _, err := f.v.Ensure(ctx, lb); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			writes += f.sim.Writes()
			requests += calls(f.sim)
			f.p.Close()
			f.sim.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/LB")
		b.ReportMetric(float64(writes)/float64(b.N*n), "writes/LB")
		b.ReportMetric(float64(requests)/float64(b.N*n), "requests/LB")
	})

	f := benchFixture(b)
	for _, lb := range lbs {
		if _, err := f.v.Ensure(ctx, lb); err != nil {
			b.Fatal(err)
		}
	}

	// changed[k] says whether LB k has its alternative members; every
	// Ensure below flips one LB, so that each is a membership change.
	changed := make([]bool, n)
	variant := func(k int) *lbmodel.LoadBalancer {
		if !changed[k] {
			return lbs[k]
		}
		base := lbs[k]
		return webLB(fmt.Sprintf("svc-%04d", k),
			tcp(80, base.Listeners[0].Pool.Members[0], member("198.18.0.14", 62000)),
			udp(53, base.Listeners[1].Pool.Members...))
	}
	next := 0
	b.Run("membership-change", func(b *testing.B) {
		f.sim.ResetCounters()
		for i := 0; i < b.N; i++ {
			k := next % n
			next++
			changed[k] = !changed[k]
			if _, err := f.v.Ensure(ctx, variant(k)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(f.sim.Writes())/float64(b.N), "writes/change")
		b.ReportMetric(float64(calls(f.sim))/float64(b.N), "requests/change")
	})

	b.Run("unchanged", func(b *testing.B) {
		f.sim.ResetCounters()
		for i := 0; i < b.N; i++ {
			if _, err := f.v.Ensure(ctx, variant(i%n)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(f.sim.Writes())/float64(b.N), "writes/op")
		b.ReportMetric(float64(calls(f.sim))/float64(b.N), "requests/op")
	})

	b.Run("list", func(b *testing.B) {
		f.sim.ResetCounters()
		for i := 0; i < b.N; i++ {
			got, err := f.p.List(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != n {
				b.Fatalf("List: %d load balancers, want %d", len(got), n)
			}
		}
		b.ReportMetric(float64(calls(f.sim))/float64(b.N), "requests/op")
	})
}

// benchGateway is a Gateway's load balancer with n HTTPRoute rules on an
// HTTP listener, each a Prefix path with a header match and a request
// header modifier to a pool of two backends weighted 3:1. The first pool's
// second member has its port moved by shift.
func benchGateway(b *testing.B, n int, shift int32) *lbmodel.LoadBalancer {
	name := lbmodel.GatewayLoadBalancerName(cluster, "ns", "bench")
	lb := &lbmodel.LoadBalancer{Name: name, Kind: lbmodel.L7, Gateway: "ns/bench",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}}, HTTP: &lbmodel.HTTPRoutes{}}
	for i := range n {
		pool := lbmodel.GatewayPoolName(name, "ns", fmt.Sprintf("r%03d", i), 0)
		port, other := int32(61000+i), int32(61000+i)
		if i == 0 {
			other += shift
		}
		lb.Pools = append(lb.Pools, lbmodel.Pool{Name: pool, Members: []lbmodel.Member{
			{IP: "198.18.0.11", Port: port, Enabled: true, Weight: 3}, {IP: "198.18.0.12", Port: other, Enabled: true}}})
		lb.HTTP.Rules = append(lb.HTTP.Rules, lbmodel.Rule{Path: fmt.Sprintf("/r%03d", i), PathType: lbmodel.PathPrefix,
			Pool: pool, Ports: []int32{80}, Headers: []lbmodel.ValueMatch{{Name: "x-env", Value: "bench"}},
			RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "x-route", Value: fmt.Sprint(i)}}}})
	}
	out, err := lbmodel.Normalize(lb)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkGatewayEnsure200 measures a Gateway of 200 weighted, filtered
// rules through the alb-sdk against the simulator: created from nothing,
// Ensured unchanged, and one member of one backend changed (one pool
// written).
func BenchmarkGatewayEnsure200(b *testing.B) {
	const n = 200
	ctx := context.Background()
	lb := benchGateway(b, n, 0)
	b.Run("cold", func(b *testing.B) {
		var writes, requests int
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			f := benchFixture(b)
			b.StartTimer()
			if _, err := f.v.Ensure(ctx, lb); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			writes += f.sim.Writes()
			requests += calls(f.sim)
			f.p.Close()
			f.sim.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
		b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
	})

	f := benchFixture(b)
	if _, err := f.v.Ensure(ctx, lb); err != nil {
		b.Fatal(err)
	}
	b.Run("unchanged", func(b *testing.B) {
		f.sim.ResetCounters()
		for i := 0; i < b.N; i++ {
			if _, err := f.v.Ensure(ctx, lb); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(f.sim.Writes())/float64(b.N), "writes/op")
		b.ReportMetric(float64(calls(f.sim))/float64(b.N), "requests/op")
	})
	// Every Ensure flips the first pool's member, across runs too.
	variants, next := []*lbmodel.LoadBalancer{lb, benchGateway(b, n, 1000)}, 0
	b.Run("member-change", func(b *testing.B) {
		f.sim.ResetCounters()
		for i := 0; i < b.N; i++ {
			next++
			if _, err := f.v.Ensure(ctx, variants[next%2]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(f.sim.Writes())/float64(b.N), "writes/op")
		b.ReportMetric(float64(calls(f.sim))/float64(b.N), "requests/op")
	})
}
