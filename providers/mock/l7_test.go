package mock

import (
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// l7Model is an Ingress load balancer of cluster c1: two hosts on two
// backends, and TLS for the first host. The mock does not parse
// certificates, so the PEM data is a stand-in.
func l7Model() *lbmodel.LoadBalancer {
	name := lbmodel.IngressLoadBalancerName(cluster, "shop", "web")
	shop := lbmodel.IngressPoolName(name, "shop", "shop", "80")
	blog := lbmodel.IngressPoolName(name, "shop", "blog", "80")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("cert-1")})
	return &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Ingress: "shop/web",
		Listeners: []lbmodel.Listener{{Port: 443, Protocol: lbmodel.HTTPS}, {Port: 80, Protocol: lbmodel.HTTP}},
		Pools: []lbmodel.Pool{
			{Name: shop, Members: []lbmodel.Member{member("198.18.0.12", 61000), member("198.18.0.11", 61000)}},
			{Name: blog, Members: []lbmodel.Member{member("198.18.0.11", 61001)}},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{
				{Host: "shop.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: shop},
				{Host: "blog.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: blog},
			},
			DefaultPool: shop,
			TLS: []lbmodel.TLSCert{{Secret: "shop/shop-tls", Hosts: []string{"shop.example.com"},
				Fingerprint: lbmodel.CertFingerprint(cert), CertPEM: cert, KeyPEM: []byte("key-1")}},
		},
	}
}

// listed is lb as List reports it: sorted, with its VIP, no PEM data.
func listed(lb *lbmodel.LoadBalancer, vip string) lbmodel.LoadBalancer {
	out, err := lbmodel.Normalize(lb)
	if err != nil {
		panic(err)
	}
	for i, c := range out.HTTP.TLS {
		out.HTTP.TLS[i] = c.WithoutKeys()
	}
	out.VIPs = []string{vip}
	return *out
}

func TestMock_l7KeepsRulesPoolsAndCertificatesWithoutKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	m := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	lb := l7Model()
	if vips := mustEnsure(t, m, lb); len(vips) != 1 || vips[0] != "203.0.113.1" {
		t.Fatalf("VIPs %v", vips)
	}
	got, err := m.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listed(lb, "203.0.113.1")}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if got[0].HTTP.TLS[0].KeyPEM != nil || got[0].HTTP.TLS[0].CertPEM != nil {
		t.Error("List returned PEM data")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "key-1") || !strings.Contains(string(data), lb.HTTP.TLS[0].Fingerprint) {
		t.Errorf("state file holds the key or lacks the fingerprint:\n%s", data)
	}

	// A reopened mock (a restart of npl-lbsync) holds the same model: the
	// same desired load balancer, PEM data included, is no write.
	m2 := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	mustEnsure(t, m2, l7Model())
	if w := m2.Counters().Writes; w != 0 {
		t.Errorf("Ensure after reopen wrote %d times, want 0", w)
	}
}

func TestMock_l7WritesOnlyWhatChanged(t *testing.T) {
	tests := []struct {
		name   string
		change func(*lbmodel.LoadBalancer)
		writes int64
	}{
		{"nothing", func(*lbmodel.LoadBalancer) {}, 0},
		{"the same model in another order", func(lb *lbmodel.LoadBalancer) {
			r := lb.HTTP.Rules
			r[0], r[1] = r[1], r[0]
			lb.Pools[0], lb.Pools[1] = lb.Pools[1], lb.Pools[0]
		}, 0},
		{"a rule's path", func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[0].Path = "/shop" }, 1},
		{"a member", func(lb *lbmodel.LoadBalancer) { lb.Pools[0].Members[0].Enabled = false }, 1},
		{"the default pool", func(lb *lbmodel.LoadBalancer) { lb.HTTP.DefaultPool = lb.Pools[1].Name }, 1},
		{"the certificate", func(lb *lbmodel.LoadBalancer) {
			c := &lb.HTTP.TLS[0]
			c.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("cert-2")})
			c.Fingerprint = lbmodel.CertFingerprint(c.CertPEM)
		}, 1},
		{"only the key (the certificate binds it: no write)", func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.TLS[0].KeyPEM = []byte("key-2")
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMock(t, Config{Common: common("203.0.113.0/29")})
			mustEnsure(t, m, l7Model())
			lb := l7Model()
			tt.change(lb)
			mustEnsure(t, m, lb)
			if got := m.Counters().Writes - 1; got != tt.writes {
				t.Errorf("writes after the change: %d, want %d", got, tt.writes)
			}
		})
	}
}

func TestMock_l7RejectsInconsistentModels(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	bad := l7Model()
	bad.HTTP.Rules[0].Pool = "nowhere"
	if _, err := providers.Validated(m).Ensure(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("Ensure with an unknown pool: %v", err)
	}
	l4 := model("web")
	l4.HTTP = &lbmodel.HTTPRoutes{}
	if _, err := providers.Validated(m).Ensure(context.Background(), l4); err == nil {
		t.Error("Ensure of an L4 load balancer with HTTP routes succeeded")
	}
	if n := len(m.State().LoadBalancers); n != 0 {
		t.Errorf("%d load balancers stored after failed Ensures", n)
	}
}

func TestMock_deleteOfTheOtherKindFindsNothing(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	lb := l7Model()
	mustEnsure(t, m, lb)
	// As on a real load balancer, whose L4 and L7 objects differ, an L4
	// load balancer of that name does not exist.
	if err := m.Delete(ctx, lb.Name, lbmodel.L4); err != nil {
		t.Fatalf("Delete(L4): %v", err)
	}
	if got := m.State().LoadBalancers; len(got) != 1 {
		t.Fatalf("Delete(L4) removed the L7 load balancer: %+v", got)
	}
	if err := m.Delete(ctx, lb.Name, lbmodel.L7); err != nil {
		t.Fatalf("Delete(L7): %v", err)
	}
	if got := m.State().LoadBalancers; len(got) != 0 {
		t.Errorf("Delete(L7) left %+v", got)
	}
}

func TestMock_l7DeleteRemovesEverything(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	lb := l7Model()
	mustEnsure(t, m, lb)
	if err := m.Delete(ctx, lb.Name, lb.Kind); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got, _ := m.List(ctx); len(got) != 0 {
		t.Errorf("List after Delete: %+v", got)
	}
	// The VIP is free again.
	if vips := mustEnsure(t, m, model("other")); vips[0] != "203.0.113.1" {
		t.Errorf("VIP after delete: %v", vips)
	}
}

// gatewayModel is l7Model as a Gateway builds it: rules per listener port
// with method, header and query tests, header filters, a rewrite, a
// redirect and a fixed status; a certificate of one port; member weights.
func gatewayModel() *lbmodel.LoadBalancer {
	lb := l7Model()
	lb.Ingress, lb.Gateway = "", "shop/gw"
	shop, blog := lb.Pools[0].Name, lb.Pools[1].Name
	lb.Pools[0].Members[0].Weight, lb.Pools[0].Members[1].Weight = 70, 30
	lb.HTTP.TLS[0].Ports = []int32{443}
	lb.HTTP.Rules = []lbmodel.Rule{
		{Host: "shop.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: shop, Ports: []int32{443}, Method: "GET",
			Headers:         []lbmodel.ValueMatch{{Name: "x-env", Value: "canary"}},
			Query:           []lbmodel.ValueMatch{{Name: "v", Value: "[0-9]+", Regex: true}},
			RequestHeaders:  &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-A", Value: "1"}}, Remove: []string{"X-B"}},
			ResponseHeaders: &lbmodel.HeaderFilter{Add: []lbmodel.Header{{Name: "X-C", Value: "2"}}},
			Rewrite:         &lbmodel.Rewrite{Hostname: "internal.example", Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/v2"}},
			Order:           1},
		{Host: "blog.example.com", Path: "/old", PathType: lbmodel.PathExact, Ports: []int32{80},
			Redirect: &lbmodel.Redirect{Scheme: "https", StatusCode: 301}},
		{Path: "/broken/.*", PathType: lbmodel.PathRegex, FixedStatus: 500},
		{Host: "blog.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: blog},
	}
	return lb
}

func TestMock_gatewayModelStoredAndListedExactly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	m := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	lb := gatewayModel()
	mustEnsure(t, m, lb)
	got, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listed(lb, "203.0.113.1")}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	// Reopened from its state file: the same model is no write.
	m2 := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	mustEnsure(t, m2, gatewayModel())
	if w := m2.Counters().Writes; w != 0 {
		t.Errorf("Ensure after reopen wrote %d times, want 0", w)
	}
	for name, change := range map[string]func(*lbmodel.LoadBalancer){
		"a weight":             func(lb *lbmodel.LoadBalancer) { lb.Pools[0].Members[0].Weight = 50 },
		"a header value":       func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[0].Headers[0].Value = "stable" },
		"a certificate's port": func(lb *lbmodel.LoadBalancer) { lb.HTTP.TLS[0].Ports = nil },
		"the redirect status":  func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[1].Redirect.StatusCode = 302 },
		"the Gateway":          func(lb *lbmodel.LoadBalancer) { lb.Gateway = "shop/gw2" },
	} {
		m := newMock(t, Config{Common: common("203.0.113.0/29")})
		mustEnsure(t, m, gatewayModel())
		lb := gatewayModel()
		change(lb)
		mustEnsure(t, m, lb)
		if w := m.Counters().Writes; w != 2 {
			t.Errorf("%s changed: %d writes, want 2", name, w)
		}
	}
}
