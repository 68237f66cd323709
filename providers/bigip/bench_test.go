package bigip

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

const benchLBs = 1000

// benchEnv starts a simulator (plain HTTP on loopback) and a token-auth
// provider on it.
func benchEnv(b *testing.B) (*bigipsim.Server, providers.Provider) {
	b.Helper()
	sim := bigipsim.New(bigipsim.Options{})
	if err := sim.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sim.Close)
	dir := b.TempDir()
	for name, content := range map[string]string{"username": "admin", "password": "admin"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	section, _ := json.Marshal(map[string]any{
		"url": sim.URL(), "usernameFile": filepath.Join(dir, "username"), "passwordFile": filepath.Join(dir, "password"),
		"insecure": true, // the simulator over http
	})
	common := providers.Common{ClusterName: "bench", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.96.0/22")}}
	cfg, err := Parse(common, section)
	if err != nil {
		b.Fatal(err)
	}
	p, err := cfg.Open(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	// As the registry opens it: the cost of the check is part of an Ensure.
	return sim, providers.Validated(p)
}

// benchLB is load balancer i: one TCP listener with three members, the
// third on port 61000+gen so that gen changes the membership.
func benchLB(i, gen int) *lbmodel.LoadBalancer {
	name := lbmodel.LoadBalancerName("bench", "ns", fmt.Sprintf("svc-%04d", i))
	node := func(n int) string { return fmt.Sprintf("198.18.%d.%d", n/250, n%250+1) }
	return &lbmodel.LoadBalancer{Name: name, Service: fmt.Sprintf("ns/svc-%04d", i), Listeners: []lbmodel.Listener{{
		Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 80), Members: []lbmodel.Member{
			{IP: node(i % 500), Port: 61000, Enabled: true},
			{IP: node((i + 1) % 500), Port: 61000, Enabled: true},
			{IP: node((i + 2) % 500), Port: int32(61001 + gen%500), Enabled: true},
		}},
	}}}
}

// BenchmarkEnsure1000 measures, against the simulator through go-bigip,
// creating 1000 load balancers on an empty BIG-IP (one op = 1000 Ensure
// calls), then changing the membership of one load balancer (one op = one
// Ensure). It reports the calls and writes each needs.
func BenchmarkEnsure1000(b *testing.B) {
	// Quiet: the provider's one Info line per run would break up the results.
	ctx := klog.NewContext(context.Background(), klog.Background().V(10))
	b.Run("cold", func(b *testing.B) {
		var writes, calls int
		for range b.N {
			b.StopTimer()
			sim, p := benchEnv(b)
			sim.ResetCounters()
			b.StartTimer()
			for i := range benchLBs {
				if _, err := p.Ensure(ctx, benchLB(i, 0)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			writes += sim.Writes()
			for _, n := range sim.Calls() {
				calls += n
			}
			sim.Close()
			b.StartTimer()
		}
		n := float64(b.N * benchLBs)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/lb")
		b.ReportMetric(float64(writes)/n, "writes/lb")
		b.ReportMetric(float64(calls)/n, "calls/lb")
	})
	b.Run("membership-change", func(b *testing.B) {
		sim, p := benchEnv(b)
		for i := range benchLBs {
			if _, err := p.Ensure(ctx, benchLB(i, 0)); err != nil {
				b.Fatal(err)
			}
		}
		sim.ResetCounters()
		b.ResetTimer()
		for n := range b.N {
			if _, err := p.Ensure(ctx, benchLB(n%benchLBs, n/benchLBs+1)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		calls := 0
		for _, c := range sim.Calls() {
			calls += c
		}
		b.ReportMetric(float64(sim.Writes())/float64(b.N), "writes/change")
		b.ReportMetric(float64(calls)/float64(b.N), "calls/change")
	})
}

// benchGateway is a Gateway's load balancer with HTTP listeners on 80 and
// 8080, 100 routes of one weighted pool and one rule each (a header match
// and a request header filter), every other one on port 80 only; gen
// changes the weight of the first route's first member.
func benchGateway(gen int) *lbmodel.LoadBalancer {
	name := lbmodel.GatewayLoadBalancerName("bench", "ns", "gw")
	lb := &lbmodel.LoadBalancer{Name: name, Kind: lbmodel.L7, Gateway: "ns/gw",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 8080, Protocol: lbmodel.HTTP}},
		HTTP:      &lbmodel.HTTPRoutes{}}
	for i := range 100 {
		pool := lbmodel.GatewayPoolName(name, "ns", fmt.Sprintf("r%03d", i), 0)
		w := int32(2)
		if i == 0 {
			w = int32(2 + gen%200)
		}
		lb.Pools = append(lb.Pools, lbmodel.Pool{Name: pool, Members: []lbmodel.Member{
			{IP: "198.18.0.1", Port: int32(61000 + i), Enabled: true, Weight: w},
			{IP: "198.18.0.2", Port: int32(61000 + i), Enabled: true, Weight: 3},
		}})
		r := lbmodel.Rule{Host: fmt.Sprintf("r%03d.example.com", i), Path: "/", PathType: lbmodel.PathPrefix, Pool: pool,
			Headers:        []lbmodel.ValueMatch{{Name: "x-env", Value: "canary"}},
			RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "x-route", Value: fmt.Sprint(i)}}}}
		if i%2 == 0 {
			r.Ports = []int32{80}
		}
		lb.HTTP.Rules = append(lb.HTTP.Rules, r)
	}
	return lb
}

// BenchmarkEnsureGateway measures, against the simulator through go-bigip,
// a Gateway of 100 routes on two listeners: Ensure when nothing changed
// (one op = one Ensure), and when one member's weight changed. It reports
// the calls and writes each needs.
func BenchmarkEnsureGateway(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(10))
	for _, c := range []struct {
		name string
		gen  func(n int) int
	}{{"unchanged", func(int) int { return 0 }}, {"weight-change", func(n int) int { return n + 1 }}} {
		b.Run(c.name, func(b *testing.B) {
			sim, p := benchEnv(b)
			if _, err := p.Ensure(ctx, benchGateway(0)); err != nil {
				b.Fatal(err)
			}
			sim.ResetCounters()
			b.ResetTimer()
			for n := range b.N {
				if _, err := p.Ensure(ctx, benchGateway(c.gen(n))); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			calls := 0
			for _, k := range sim.Calls() {
				calls += k
			}
			b.ReportMetric(float64(sim.Writes())/float64(b.N), "writes/op")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
		})
	}
}
