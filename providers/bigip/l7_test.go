package bigip

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

// tlsCert returns a model certificate of Secret shop/<secret> for host,
// self-signed with a new EC key.
func tlsCert(t testing.TB, secret, host string) lbmodel.TLSCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return lbmodel.TLSCert{Secret: "shop/" + secret, Hosts: []string{host}, Fingerprint: lbmodel.CertFingerprint(certPEM),
		CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
}

// ingressLB is the L7 load balancer of Ingress shop/web: shop.example.com to
// Service shop, blog.example.com to Service blog (an exact path and a
// prefix), the default backend shop, and TLS for shop.example.com.
func ingressLB(certs ...lbmodel.TLSCert) *lbmodel.LoadBalancer {
	name := lbmodel.IngressLoadBalancerName(testCluster, "shop", "web")
	shop := lbmodel.IngressPoolName(name, "shop", "shop", "80")
	blog := lbmodel.IngressPoolName(name, "shop", "blog", "8080")
	lb := &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Ingress: "shop/web",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools: []lbmodel.Pool{
			{Name: blog, Members: []lbmodel.Member{member("198.18.0.11", 61002)}},
			{Name: shop, Members: []lbmodel.Member{member("198.18.0.11", 61000), member("198.18.0.12", 61001)}},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{
				{Host: "blog.example.com", Path: "/feed", PathType: lbmodel.PathExact, Pool: blog},
				{Host: "blog.example.com", Path: "/posts", PathType: lbmodel.PathPrefix, Pool: blog},
				{Host: "shop.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: shop},
			},
			DefaultPool: shop,
			TLS:         certs,
		},
	}
	if len(certs) > 0 {
		lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: 443, Protocol: lbmodel.HTTPS})
	}
	return lb
}

// listedL7 is lb as List reports it: its VIP, certificates without keys.
func listedL7(lb *lbmodel.LoadBalancer, vip string) lbmodel.LoadBalancer {
	out := *lb
	out.VIPs, out.RequestedVIP = []string{vip}, ""
	h := *lb.HTTP
	h.TLS = nil
	for _, c := range lb.HTTP.TLS {
		h.TLS = append(h.TLS, c.WithoutKeys())
	}
	out.HTTP = &h
	return out
}

func (e *env) list(t *testing.T) []lbmodel.LoadBalancer {
	t.Helper()
	lbs, err := e.prov.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return lbs
}

func TestProvider_l7CreatesVirtualsWithAPolicyAndClientSSL(t *testing.T) {
	e := newEnv(t, envOptions{})
	cert := tlsCert(t, "shop-tls", "shop.example.com")
	lb := ingressLB(cert)
	name := lb.Name
	p := "/" + testPartition + "/"
	shop, blog := p+lb.Pools[1].Name, p+lb.Pools[0].Name
	profile := name + "_shop_shop-tls-TLS"
	file := profile + "-" + cert.Fingerprint[:12]

	if st := e.ensure(t, lb); !cmp.Equal(st.VIPs, []string{"198.18.100.1"}) {
		t.Errorf("VIPs %v", st.VIPs)
	}
	got := e.sim.Dump()
	wantVirtuals := []bigipsim.Virtual{
		{FullPath: p + name + "-HTTP-80", Destination: p + "198.18.100.1:80", IPProtocol: "tcp", Pool: shop,
			SourceAddressTranslation: "automap", Profiles: []string{"/Common/tcp", "/Common/http"}, Policies: []string{p + name}},
		{FullPath: p + name + "-HTTPS-443", Destination: p + "198.18.100.1:443", IPProtocol: "tcp", Pool: shop,
			SourceAddressTranslation: "automap", Profiles: []string{"/Common/tcp", "/Common/http", p + profile}, Policies: []string{p + name}},
	}
	for i := range got.Virtuals {
		got.Virtuals[i].Description = ""
	}
	if diff := cmp.Diff(wantVirtuals, got.Virtuals); diff != "" {
		t.Errorf("virtuals (-want +got):\n%s", diff)
	}
	wantPolicies := []bigipsim.Policy{{FullPath: p + name, Status: "published", Rules: []string{
		"rule-0.0: httpHost host equals [blog.example.com]; httpUri path equals [/feed] -> forward " + blog,
		"rule-1.0: httpHost host equals [blog.example.com]; httpUri path equals [/posts] -> forward " + blog,
		"rule-1.1: httpHost host equals [blog.example.com]; httpUri path startsWith [/posts/] -> forward " + blog,
		"rule-2.0: httpHost host equals [shop.example.com]; httpUri path startsWith [/] -> forward " + shop,
	}}}
	for i := range got.Policies {
		got.Policies[i].Description = ""
	}
	if diff := cmp.Diff(wantPolicies, got.Policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	if len(got.ClientSSLProfiles) != 1 || got.ClientSSLProfiles[0].Cert != p+file || got.ClientSSLProfiles[0].Key != p+file ||
		!got.ClientSSLProfiles[0].SNIDefault {
		t.Errorf("client-ssl profiles: %+v", got.ClientSSLProfiles)
	}
	if len(got.Certificates) != 1 || len(got.Keys) != 1 || got.Certificates[0].Checksum != fileChecksum(cert.CertPEM) {
		t.Errorf("certificates %+v keys %+v", got.Certificates, got.Keys)
	}
	if n := e.sim.Count("POST", bigipsim.KindUpload); n != 2 {
		t.Errorf("uploads: %d, want 2", n)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.100.1")}, e.list(t)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_l7WritesOnlyWhatChanged(t *testing.T) {
	cert := tlsCert(t, "shop-tls", "shop.example.com")
	rotated := tlsCert(t, "shop-tls", "shop.example.com")
	tests := []struct {
		name   string
		change func(*lbmodel.LoadBalancer)
		writes map[string]int
	}{
		{"nothing", func(*lbmodel.LoadBalancer) {}, map[string]int{}},
		{"a member", func(lb *lbmodel.LoadBalancer) { lb.Pools[1].Members[0].Enabled = false }, map[string]int{"PUT pool": 1}},
		// A published policy changes through a draft: make it, change it,
		// publish it.
		{"a rule's path", func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[0].Path = "/rss" },
			map[string]int{"PATCH ltm-policy": 1, "PUT ltm-policy": 1, "POST ltm-policy": 1}},
		// A new certificate gets new files, so it never meets the old key.
		{"the certificate", func(lb *lbmodel.LoadBalancer) { lb.HTTP.TLS[0] = rotated },
			map[string]int{"POST upload": 2, "POST ssl-cert": 1, "POST ssl-key": 1, "PATCH client-ssl": 1,
				"DELETE ssl-cert": 1, "DELETE ssl-key": 1}},
		{"the default pool", func(lb *lbmodel.LoadBalancer) { lb.HTTP.DefaultPool = lb.Pools[0].Name },
			map[string]int{"PATCH virtual": 2}},
		{"no TLS any more", func(lb *lbmodel.LoadBalancer) { lb.HTTP.TLS, lb.Listeners = nil, lb.Listeners[:1] },
			map[string]int{"DELETE virtual": 1, "DELETE client-ssl": 1, "DELETE ssl-cert": 1, "DELETE ssl-key": 1}},
		{"a backend removed", func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules, lb.Pools = lb.HTTP.Rules[2:], lb.Pools[1:] },
			map[string]int{"PATCH ltm-policy": 1, "PUT ltm-policy": 1, "POST ltm-policy": 1, "DELETE pool": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.ensure(t, ingressLB(cert))
			e.sim.ResetCounters()
			lb := ingressLB(cert)
			tt.change(lb)
			e.ensure(t, lb)
			if diff := cmp.Diff(tt.writes, writesOnly(e.sim.Calls())); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.100.1")}, e.list(t)); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProvider_l7RestartWritesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := ingressLB(tlsCert(t, "shop-tls", "shop.example.com"))
	e.ensure(t, lb)
	e.sim.ResetCounters()
	if _, err := e.reopen(t).Ensure(context.Background(), lb); err != nil {
		t.Fatalf("Ensure after a restart: %v", err)
	}
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes after a restart: %d (calls %v)", got, e.sim.Calls())
	}
}

func TestProvider_l7SeveralCertificatesUseSNI(t *testing.T) {
	e := newEnv(t, envOptions{})
	a, b := tlsCert(t, "a-tls", "shop.example.com"), tlsCert(t, "b-tls", "blog.example.com")
	lb := ingressLB(a, b)
	e.ensure(t, lb)
	profiles := e.sim.Dump().ClientSSLProfiles
	if len(profiles) != 2 || !profiles[0].SNIDefault || profiles[1].SNIDefault ||
		profiles[0].ServerName != "shop.example.com" || profiles[1].ServerName != "blog.example.com" {
		t.Errorf("client-ssl profiles: %+v", profiles)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.100.1")}, e.list(t)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_l7DeleteRemovesEverythingAndLeavesTheL4LoadBalancer(t *testing.T) {
	e := newEnv(t, envOptions{})
	l4 := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	l7 := ingressLB(tlsCert(t, "shop-tls", "shop.example.com"))
	e.ensure(t, l4)
	e.ensure(t, l7)
	wantBoth := []lbmodel.LoadBalancer{
		{Name: l4.Name, Service: "shop/web", VIPs: []string{"198.18.100.1"}, Listeners: l4.Listeners},
		listedL7(l7, "198.18.100.2"),
	}
	if diff := cmp.Diff(wantBoth, e.list(t)); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}

	if err := e.prov.Delete(context.Background(), l7.Name, l7.Kind); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	st := e.sim.Dump()
	if len(st.Policies)+len(st.ClientSSLProfiles)+len(st.Certificates)+len(st.Keys) != 0 || len(st.Virtuals) != 1 || len(st.Pools) != 1 {
		t.Errorf("left after Delete: %+v", st)
	}
	if diff := cmp.Diff(wantBoth[:1], e.list(t)); diff != "" {
		t.Errorf("List after Delete (-want +got):\n%s", diff)
	}
	e.sim.ResetCounters()
	if err := e.prov.Delete(context.Background(), l7.Name, l7.Kind); err != nil || e.sim.Writes() != 0 {
		t.Errorf("second Delete: %v, writes %v", err, writesOnly(e.sim.Calls()))
	}
}

// renamed returns lb under another name, its pools renamed to match: an L7
// load balancer whose name does not end in -L7, as a later owner (a
// Gateway) may name one.
func renamed(lb *lbmodel.LoadBalancer, name string) *lbmodel.LoadBalancer {
	out := lb.Clone()
	rename := func(s string) string { return strings.Replace(s, lb.Name, name, 1) }
	out.Name = name
	for i := range out.Pools {
		out.Pools[i].Name = rename(out.Pools[i].Name)
	}
	for i := range out.HTTP.Rules {
		out.HTTP.Rules[i].Pool = rename(out.HTTP.Rules[i].Pool)
	}
	out.HTTP.DefaultPool = rename(out.HTTP.DefaultPool)
	return out
}

func TestProvider_deleteIsToldTheKindNotGuessedFromTheName(t *testing.T) {
	e := newEnv(t, envOptions{})
	gw := renamed(ingressLB(tlsCert(t, "shop-tls", "shop.example.com")), lbmodel.LoadBalancerName(testCluster, "shop", "gateway"))
	e.ensure(t, gw)
	if err := e.prov.Delete(context.Background(), gw.Name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	st := e.sim.Dump()
	if n := len(st.Virtuals) + len(st.Pools) + len(st.Policies) + len(st.ClientSSLProfiles) + len(st.Certificates) + len(st.Keys); n != 0 {
		t.Errorf("%d objects left after Delete: %+v", n, st)
	}
}

func TestProvider_l7RefusesOnAnIngressWhatAnIngressDoesNotHave(t *testing.T) {
	for field, change := range map[string]func(*lbmodel.LoadBalancer){
		"headers": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[2].Headers = []lbmodel.ValueMatch{{Name: "x", Value: "y"}}
		},
		"redirect": func(lb *lbmodel.LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Redirect = "", &lbmodel.Redirect{StatusCode: 302}
		},
		"member weights":     func(lb *lbmodel.LoadBalancer) { lb.Pools[0].Members[0].Weight = 3 },
		"pathType RegularEx": func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[2].PathType = lbmodel.PathRegex },
	} {
		e := newEnv(t, envOptions{})
		lb := ingressLB()
		change(lb)
		before := writesOnly(e.sim.Calls())
		_, err := providers.Validated(e.prov).Ensure(context.Background(), lb)
		if !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Ensure = %v, want ErrUnsupported naming it", field, err)
		}
		if w := writesOnly(e.sim.Calls()); !cmp.Equal(w, before) {
			t.Errorf("%s: writes %v, want none", field, w)
		}
	}
}
