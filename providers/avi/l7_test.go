package avi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// tlsCert returns a model certificate of Secret ns/<secret> for host,
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
	return lbmodel.TLSCert{Secret: "ns/" + secret, Hosts: []string{host}, Fingerprint: lbmodel.CertFingerprint(certPEM),
		CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
}

// ingressLB is the L7 load balancer of Ingress ns/web: shop.example.com to
// Service shop, blog.example.com to Service blog (an exact path and a
// prefix), the default backend shop, and TLS for shop.example.com.
func ingressLB(cert lbmodel.TLSCert) *lbmodel.LoadBalancer {
	name := lbmodel.IngressLoadBalancerName(cluster, "ns", "web")
	shop := lbmodel.IngressPoolName(name, "ns", "shop", "80")
	blog := lbmodel.IngressPoolName(name, "ns", "blog", "8080")
	return &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Ingress: "ns/web",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS}},
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
			TLS:         []lbmodel.TLSCert{cert},
		},
	}
}

// listedL7 is lb as List reports it: its VIPs, certificates without keys.
func listedL7(lb *lbmodel.LoadBalancer, vips ...string) lbmodel.LoadBalancer {
	out := *lb
	out.VIPs, out.RequestedVIP = vips, ""
	h := *lb.HTTP
	h.TLS = nil
	for _, c := range lb.HTTP.TLS {
		h.TLS = append(h.TLS, c.WithoutKeys())
	}
	out.HTTP = &h
	return out
}

func TestProvider_l7CreatesAVirtualServiceWithAnHTTPPolicySet(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := ingressLB(tlsCert(t, "shop-tls", "shop.example.com"))
	name := lb.Name
	shop, blog := lb.Pools[1].Name, lb.Pools[0].Name

	st := f.ensure(lb)

	if diff := cmp.Diff([]string{"198.18.200.1"}, st.VIPs); diff != "" {
		t.Errorf("Status.VIPs (-want +got):\n%s", diff)
	}
	wantWrites := []string{"POST vsvip", "POST pool", "POST pool", "POST sslkeyandcertificate", "POST httppolicyset", "POST virtualservice"}
	if diff := cmp.Diff(wantWrites, f.writes()); diff != "" {
		t.Errorf("writes, in order (-want +got):\n%s", diff)
	}

	certs := objects[models.SSLKeyAndCertificate](f, "sslkeyandcertificate")
	if len(certs) != 1 || deref(certs[0].Name) != name+"_ns_shop-tls-TLS" || deref(certs[0].CreatedBy) != "npl-c1" {
		t.Fatalf("certificates: %v", f.names("sslkeyandcertificate"))
	}
	if certs[0].Key != nil {
		t.Error("the simulator showed the private key")
	}

	policies := objects[models.HTTPPolicySet](f, "httppolicyset")
	if len(policies) != 1 || deref(policies[0].Name) != name {
		t.Fatalf("httppolicysets: %v", f.names("httppolicyset"))
	}
	var rules []string
	for _, r := range policies[0].HTTPRequestPolicy.Rules {
		rules = append(rules, fmt.Sprintf("%d %s %s %v %s %v -> %s", *r.Index, *r.Name, *r.Match.HostHdr.MatchCriteria,
			r.Match.HostHdr.Value, *r.Match.Path.MatchCriteria, r.Match.Path.MatchStr, refName(r.SwitchingAction.PoolRef)))
	}
	wantRules := []string{
		"1 rule-0.0 HDR_EQUALS [blog.example.com] EQUALS [/feed] -> " + blog,
		"2 rule-1.0 HDR_EQUALS [blog.example.com] EQUALS [/posts] -> " + blog,
		"3 rule-1.1 HDR_EQUALS [blog.example.com] BEGINS_WITH [/posts/] -> " + blog,
		"4 rule-2.0 HDR_EQUALS [shop.example.com] BEGINS_WITH [/] -> " + shop,
	}
	if diff := cmp.Diff(wantRules, rules); diff != "" {
		t.Errorf("request rules (-want +got):\n%s", diff)
	}

	vss := objects[models.VirtualService](f, "virtualservice")
	if len(vss) != 1 {
		t.Fatalf("virtualservices: %v", f.names("virtualservice"))
	}
	vs := vss[0]
	var services []string
	for _, s := range vs.Services {
		services = append(services, fmt.Sprintf("%d ssl=%v", *s.Port, s.EnableSsl != nil && *s.EnableSsl))
	}
	got := map[string]string{
		"application_profile": refName(vs.ApplicationProfileRef), "ssl_profile": refName(vs.SslProfileRef),
		"pool": refName(vs.PoolRef), "http_policy": refName(vs.HTTPPolicies[0].HTTPPolicySetRef),
		"certificates": fmt.Sprint(len(vs.SslKeyAndCertificateRefs)), "services": strings.Join(services, ", "),
		"l4_policies": fmt.Sprint(len(vs.L4Policies)),
	}
	want := map[string]string{
		"application_profile": "System-Secure-HTTP", "ssl_profile": "System-Standard", "pool": shop, "http_policy": name,
		"certificates": "1", "services": "80 ssl=false, 443 ssl=true", "l4_policies": "0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("virtual service (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_l7WritesOnlyWhatChanged(t *testing.T) {
	cert := tlsCert(t, "shop-tls", "shop.example.com")
	rotated := tlsCert(t, "shop-tls", "shop.example.com")
	tests := []struct {
		name   string
		change func(*lbmodel.LoadBalancer)
		writes []string
	}{
		{"nothing", func(*lbmodel.LoadBalancer) {}, nil},
		{"a rule's path", func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[0].Path = "/rss" }, []string{"PUT httppolicyset"}},
		{"a member", func(lb *lbmodel.LoadBalancer) { lb.Pools[1].Members[0].Enabled = false }, []string{"PUT pool"}},
		{"the certificate", func(lb *lbmodel.LoadBalancer) { lb.HTTP.TLS[0] = rotated }, []string{"PUT sslkeyandcertificate"}},
		{"the default pool", func(lb *lbmodel.LoadBalancer) { lb.HTTP.DefaultPool = lb.Pools[0].Name }, []string{"PUT virtualservice"}},
		{"no TLS any more", func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.TLS, lb.Listeners = nil, lb.Listeners[:1]
		}, []string{"PUT virtualservice", "DELETE sslkeyandcertificate"}},
		{"a backend removed", func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules, lb.Pools = lb.HTTP.Rules[2:], lb.Pools[1:]
		}, []string{"PUT httppolicyset", "DELETE pool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			f.ensure(ingressLB(cert))
			f.sim.ResetCounters()
			lb := ingressLB(cert)
			tt.change(lb)
			f.ensure(lb)
			if diff := cmp.Diff(tt.writes, f.writes()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list()); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProvider_l7DeleteRemovesEverythingAndLeavesTheL4LoadBalancer(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	// The Service ns/web and the Ingress ns/web each have a load balancer.
	l4 := webLB("web", tcp(80, member("198.18.0.11", 61000)))
	l7 := ingressLB(tlsCert(t, "shop-tls", "shop.example.com"))
	f.ensure(l4)
	f.ensure(l7)
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(l4, "198.18.200.1"), listedL7(l7, "198.18.200.2")}, f.list()); diff != "" {
		t.Fatalf("List (-want +got):\n%s", diff)
	}

	if err := f.p.Delete(context.Background(), l7.Name, l7.Kind); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, typ := range []string{"httppolicyset", "sslkeyandcertificate"} {
		if n := f.names(typ); len(n) != 0 {
			t.Errorf("%s left: %v", typ, n)
		}
	}
	for typ, want := range map[string][]string{
		"virtualservice": {l4.Name}, "vsvip": {l4.Name}, "pool": {l4.Listeners[0].Pool.Name}, "l4policyset": {l4.Name},
	} {
		if diff := cmp.Diff(want, f.names(typ)); diff != "" {
			t.Errorf("%s left (-want +got):\n%s", typ, diff)
		}
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(l4, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List after Delete (-want +got):\n%s", diff)
	}
	f.sim.ResetCounters()
	if err := f.p.Delete(context.Background(), l7.Name, l7.Kind); err != nil || len(f.writes()) != 0 {
		t.Errorf("second Delete: %v, writes %v", err, f.writes())
	}
}

func TestProvider_l7ListFindsPartsLeftByAFailedDelete(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := ingressLB(tlsCert(t, "shop-tls", "shop.example.com"))
	f.ensure(lb)
	// Delete the virtual service and policy set by hand: the pools,
	// certificate and VsVip are left, as after an interrupted Delete.
	for _, typ := range []string{"virtualservice", "httppolicyset"} {
		o := f.sim.Objects("admin", typ)[0]
		if err := f.sim.DeleteObject("admin", typ, o["uuid"].(string)); err != nil {
			t.Fatalf("delete %s: %v", typ, err)
		}
	}
	lbs := f.list()
	if len(lbs) != 1 || lbs[0].Name != lb.Name || len(lbs[0].Pools) != 2 || len(lbs[0].HTTP.TLS) != 1 {
		t.Fatalf("List: %+v", lbs)
	}
	if err := f.p.Delete(context.Background(), lb.Name, lb.Kind); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, typ := range []string{"pool", "sslkeyandcertificate", "vsvip"} {
		if n := f.names(typ); len(n) != 0 {
			t.Errorf("%s left: %v", typ, n)
		}
	}
}

func TestProvider_l7RefusesTwoCertificatesOfOneKeyType(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := ingressLB(tlsCert(t, "a-tls", "shop.example.com"))
	lb.HTTP.TLS = append(lb.HTTP.TLS, tlsCert(t, "b-tls", "blog.example.com"))
	_, err := f.v.Ensure(context.Background(), lb)
	if err == nil || !strings.Contains(err.Error(), "one RSA and one EC certificate") {
		t.Errorf("Ensure: %v, want an error about one certificate per key type", err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes: %v, want none", w)
	}
}

func TestProvider_l7ShortensLongNamesAndListsTheModelNames(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := ingressLB(tlsCert(t, "shop-tls", "shop.example.com"))
	long := strings.Repeat("i", 250)
	rename := map[string]string{}
	lb.Name = lbmodel.IngressLoadBalancerName(cluster, "ns", long)
	lb.Ingress = "ns/" + long
	for i := range lb.Pools {
		n := strings.Replace(lb.Pools[i].Name, "c1--ns_web-L7", lb.Name, 1)
		rename[lb.Pools[i].Name], lb.Pools[i].Name = n, n
	}
	for i := range lb.HTTP.Rules {
		lb.HTTP.Rules[i].Pool = rename[lb.HTTP.Rules[i].Pool]
	}
	lb.HTTP.DefaultPool = rename[lb.HTTP.DefaultPool]

	f.ensure(lb)
	for _, typ := range []string{"vsvip", "pool", "sslkeyandcertificate", "httppolicyset", "virtualservice"} {
		for _, n := range f.names(typ) {
			if len(n) > maxNameLength {
				t.Errorf("%s name has %d bytes, more than %d", typ, len(n), maxNameLength)
			}
		}
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List reports the names npl-lbsync uses (-want +got):\n%s", diff)
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if w := f.writes(); len(w) != 0 {
		t.Errorf("second Ensure: writes %v", w)
	}
	if err := f.p.Delete(context.Background(), lb.Name, lb.Kind); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"vsvip", "pool", "sslkeyandcertificate", "httppolicyset", "virtualservice"} {
		if n := f.names(typ); len(n) != 0 {
			t.Errorf("%s left: %v", typ, n)
		}
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
	f := newFixture(t, fixtureOptions{})
	gw := renamed(ingressLB(tlsCert(t, "shop-tls", "shop.example.com")), lbmodel.LoadBalancerName(cluster, "ns", "gateway"))
	f.ensure(gw)
	if err := f.p.Delete(context.Background(), gw.Name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, typ := range []string{"virtualservice", "vsvip", "pool", "httppolicyset", "sslkeyandcertificate"} {
		if n := f.names(typ); len(n) != 0 {
			t.Errorf("%s left: %v", typ, n)
		}
	}
}

func TestProvider_l7RefusesGatewayFieldsItCannotExpress(t *testing.T) {
	for field, change := range map[string]func(*lbmodel.LoadBalancer){
		"query": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[2].Query = []lbmodel.ValueMatch{{Name: "x", Value: "y"}}
		},
		"fixedStatus":    func(lb *lbmodel.LoadBalancer) { r := &lb.HTTP.Rules[0]; r.Pool, r.FixedStatus = "", 500 },
		"member weights": func(lb *lbmodel.LoadBalancer) { lb.Pools[1].Members[1].Weight = 70 },
		"backends": func(lb *lbmodel.LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Backends = "", []lbmodel.RuleBackend{{Pool: lb.Pools[0].Name, Weight: 1}, {Pool: lb.Pools[1].Name, Weight: 1}}
		},
		"cors": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &lbmodel.CORS{AllowOrigins: []string{"*"}, MaxAgeSeconds: 5}
		},
		"some listeners only": func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[1].Ports = []int32{443} },
	} {
		f := newFixture(t, fixtureOptions{})
		lb := ingressLB(tlsCert(t, "a-tls", "shop.example.com"))
		change(lb)
		_, err := providers.Validated(f.v).Ensure(context.Background(), lb)
		if !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Ensure = %v, want ErrUnsupported naming it", field, err)
		}
		if w := f.writes(); len(w) != 0 {
			t.Errorf("%s: writes %v, want none", field, w)
		}
	}
}
