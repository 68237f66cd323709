package haproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nodeportlocal/npl/lbmodel"
)

// bigGateway is an HTTP frontend with n rules that use every test and
// action, on n/10 pools of 10 members.
func bigGateway(n int) Proxies {
	f := Frontend{Name: "c1--gw-HTTP-80", Cluster: "c1", LoadBalancer: "c1--gw", Gateway: "ns/gw", HTTP: true,
		VIP: netip.MustParseAddr("198.18.200.1"), Port: 80}
	var px Proxies
	for i := range n / 10 {
		b := Backend{Name: fmt.Sprintf("c1--gw-p%d", i), Cluster: "c1", LoadBalancer: "c1--gw", HTTP: true}
		for j := range 10 {
			b.Members = append(b.Members, lbmodel.Member{IP: fmt.Sprintf("198.18.0.%d", 10+j), Port: int32(61000 + i), Enabled: true, Weight: int32(1 + j)})
		}
		px.Backends = append(px.Backends, b)
	}
	for i := range n {
		f.Rules = append(f.Rules, lbmodel.Rule{Host: fmt.Sprintf("h%d.example", i%50), Path: fmt.Sprintf("/p%d", i),
			PathType: lbmodel.PathPrefix, Pool: fmt.Sprintf("c1--gw-p%d", i/10), Method: "GET",
			Headers:         []lbmodel.ValueMatch{{Name: "x-env", Value: "canary"}},
			Query:           []lbmodel.ValueMatch{{Name: "v", Value: "[0-9]+", Regex: true}},
			RequestHeaders:  &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-A", Value: "a b"}}},
			ResponseHeaders: &lbmodel.HeaderFilter{Remove: []string{"Server"}},
			Rewrite:         &lbmodel.Rewrite{Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/x"}}})
	}
	px.Frontends = []Frontend{f}
	return px
}

// BenchmarkRender_gateway1000Rules renders and parses back a frontend of
// 1000 rules; the first run also times haproxy -c on it.
func BenchmarkRender_gateway1000Rules(b *testing.B) {
	px := bigGateway(1000)
	g := Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}
	r := Render(g, px)
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		b.Fatal("haproxy not found: run make deps (apt-get install haproxy)")
	}
	path := filepath.Join(b.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := Check(context.Background(), bin, path); err != nil {
		b.Fatalf("haproxy -c: %v", err)
	}
	b.ReportMetric(float64(len(r.Text)), "config-bytes")
	b.ResetTimer()
	for range b.N {
		r := Render(g, px)
		if _, err := Parse(r.Text); err != nil {
			b.Fatal(err)
		}
	}
}
