package haproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
)

// testGlobals are the globals of the rendered samples.
var testGlobals = Globals{AdminSocket: "/run/a.sock", InvalidSocket: "/run/500.sock", Checks: DefaultChecks}

func sampleProxies() Proxies {
	vip := netip.MustParseAddr("198.18.200.1")
	return Proxies{
		Frontends: []Frontend{
			{Name: "c1--ns-web-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-web", Service: "ns/web", VIP: vip, Port: 80,
				DefaultBackend: "c1--ns-web-TCP-80"},
			{Name: "c1--ns-web-TCP-443", Cluster: "c1", LoadBalancer: "c1--ns-web", Service: "ns/web", VIP: vip, Port: 443,
				DefaultBackend: "c1--ns-web-TCP-443"},
			{Name: "c1--ns-v6-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-v6", Service: "ns/v6", VIP: netip.MustParseAddr("fd00:198:18::1"),
				Port: 80, DefaultBackend: "c1--ns-v6-TCP-80"},
			{Name: "c1--ns-ing-L7-HTTP-80", Cluster: "c1", LoadBalancer: "c1--ns-ing-L7", Ingress: "ns/ing", HTTP: true,
				VIP: netip.MustParseAddr("198.18.200.2"), Port: 80, DefaultBackend: "c1--ns-ing-L7-ns-web-80", Rules: []lbmodel.Rule{
					{Host: "a.example.com", Path: "/api", PathType: lbmodel.PathExact, Pool: "c1--ns-ing-L7-ns-api-80"},
					{Host: "*.example.com", Path: "/shop", PathType: lbmodel.PathPrefix, Pool: "c1--ns-ing-L7-ns-web-80"},
					{Path: "/", PathType: lbmodel.PathPrefix, Pool: "c1--ns-ing-L7-ns-web-80"},
				}},
			{Name: "c1--ns-gw-HTTPS-8443", Cluster: "c1", LoadBalancer: "c1--ns-gw", Gateway: "ns/gw", HTTP: true,
				VIP: netip.MustParseAddr("198.18.200.3"), Port: 8443, Rules: gatewayRules(), Certificates: []CertFile{
					{Path: "/run/tls/a b.pem", Cert: lbmodel.TLSCert{Secret: "ns/a", Hosts: []string{"a.example"}, Fingerprint: "aa", Ports: []int32{8443}}},
					{Path: "/run/tls/b.pem", Cert: lbmodel.TLSCert{Secret: "ns/b", Fingerprint: "bb"}},
				}},
			{Name: "c1--ns-gw-TCP-9000", Cluster: "c1", LoadBalancer: "c1--ns-gw", Gateway: "ns/gw", Listener: lbmodel.TCP,
				VIP: netip.MustParseAddr("198.18.200.3"), Port: 9000, DefaultBackend: "c1--ns-gw-TCP-9000"},
			{Name: "c1--ns-gw-TLS-8883", Cluster: "c1", LoadBalancer: "c1--ns-gw", Gateway: "ns/gw", Listener: lbmodel.TLS,
				VIP: netip.MustParseAddr("198.18.200.3"), Port: 8883, SNI: []lbmodel.SNIRoute{
					{Host: "a.example", Pool: "c1--ns-gw-a"}, {Host: "*.it's.example", Pool: "c1--ns-gw-a"}, {Pool: "c1--ns-gw-a"}}},
			{Name: "c1--ns-gw-TLS-9443", Cluster: "c1", LoadBalancer: "c1--ns-gw", Gateway: "ns/gw", Listener: lbmodel.TLS,
				VIP: netip.MustParseAddr("198.18.200.3"), Port: 9443, SNI: []lbmodel.SNIRoute{{Host: "t.example", Pool: "c1--ns-gw-a"}},
				Certificates: []CertFile{{Path: "/run/tls/b.pem", Cert: lbmodel.TLSCert{Secret: "ns/b", Fingerprint: "bb", Ports: []int32{9443}}}}},
		},
		Backends: []Backend{
			{Name: "c1--ns-web-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-web", Members: []lbmodel.Member{
				{IP: "198.18.0.11", Port: 61001, Enabled: true},
				{IP: "198.18.0.12", Port: 61002, Enabled: false},
			}, Policy: &lbmodel.Policy{
				Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800},
				HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/health z'", Host: "web.example",
					ExpectedStatuses: []lbmodel.StatusRange{{Min: 200, Max: 299}, {Min: 302, Max: 302}}, IntervalSeconds: 5, TimeoutSeconds: 2, Rise: 2, Fall: 3},
				Algorithm:        &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP},
				SlowStartSeconds: 10, MaxConnectionsPerMember: 100,
			}},
			{Name: "c1--ns-web-TCP-443", Cluster: "c1", LoadBalancer: "c1--ns-web", Members: []lbmodel.Member{}},
			{Name: "c1--ns-v6-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-v6", Members: []lbmodel.Member{
				{IP: "fd00:198:18::11", Port: 61001, Enabled: true},
			}, IPv6: true, Policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP},
				Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections}}},
			{Name: "c1--ns-ing-L7-ns-api-80", Cluster: "c1", LoadBalancer: "c1--ns-ing-L7", HTTP: true, Members: []lbmodel.Member{
				{IP: "198.18.0.11", Port: 61003, Enabled: true},
			}, CAFile: "/run/ca/a b.pem", Policy: &lbmodel.Policy{
				Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "it's", TimeoutSeconds: 3600, IdleTimeoutSeconds: 600, Permanent: true},
				Algorithm:   &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashCookie, HashName: "u'1"},
				Timeouts:    &lbmodel.Timeouts{RequestMillis: 1000, BackendRequestMillis: 300},
				Retry:       &lbmodel.Retry{Attempts: 5, Codes: []int32{500, 503}},
				BackendTLS: &lbmodel.BackendTLS{Hostname: "a.example", CACertPEM: "-----BEGIN CERTIFICATE-----\n",
					SubjectAltNames: []lbmodel.SubjectAltName{{Type: lbmodel.SANHostname, Value: "a.example"}}},
			}},
			{Name: "c1--ns-ing-L7-ns-web-80", Cluster: "c1", LoadBalancer: "c1--ns-ing-L7", HTTP: true, Members: []lbmodel.Member{},
				Policy: &lbmodel.Policy{
					Persistence: &lbmodel.Persistence{Type: lbmodel.PersistHeader, Name: "x-session", TimeoutSeconds: 60},
					Algorithm:   &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "x-user#1"},
					Timeouts:    &lbmodel.Timeouts{RequestMillis: 500},
					Retry:       &lbmodel.Retry{Attempts: 2},
				}},
			{Name: "c1--ns-gw-a", Cluster: "c1", LoadBalancer: "c1--ns-gw", HTTP: true, Members: []lbmodel.Member{
				{IP: "198.18.0.11", Port: 61005, Enabled: true, Weight: 70},
				{IP: "198.18.0.12", Port: 61005, Enabled: true},
			}, Policy: gwPolicy},
			{Name: "c1--ns-gw-a:tls", Cluster: "c1", LoadBalancer: "c1--ns-gw", Pool: "c1--ns-gw-a", Members: []lbmodel.Member{
				{IP: "198.18.0.11", Port: 61005, Enabled: true, Weight: 70},
			}, Policy: gwPolicy},
			{Name: "c1--ns-gw-grpc", Cluster: "c1", LoadBalancer: "c1--ns-gw", HTTP: true, AppProtocol: lbmodel.AppProtocolH2C,
				Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61006, Enabled: true}}, InvalidWeight: 3},
			{Name: "c1--ns-gw-TCP-9000", Cluster: "c1", LoadBalancer: "c1--ns-gw", Members: []lbmodel.Member{
				{IP: "198.18.0.11", Port: 61007, Enabled: true, Weight: 3}}},
		},
	}
}

// gwPolicy is the policy of a pool that HTTP rules and TLS routes share:
// its TLS copy checks the members with TCP.
var gwPolicy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 60},
	HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz"}}

// gatewayRules are rules with every field Gateway API routes fill, values
// with blanks, quotes, backslashes, % and braces among them.
func gatewayRules() []lbmodel.Rule {
	return []lbmodel.Rule{
		{Host: "a.example", Path: "/app", PathType: lbmodel.PathPrefix, Pool: "c1--ns-gw-a", Ports: []int32{8443}, Method: "GET",
			Headers: []lbmodel.ValueMatch{{Name: "x-it's", Value: `it's "a" \ %x} #y`}},
			Query:   []lbmodel.ValueMatch{{Name: "q", Value: "^-v[0-9]", Regex: true}},
			RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-S", Value: `a b 100% "q"`}},
				Add: []lbmodel.Header{{Name: "X-A", Value: "v"}}, Remove: []string{"X-R"}},
			ResponseHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-Resp", Value: "r"}}},
			Rewrite:         &lbmodel.Rewrite{Hostname: "rewritten.example", Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch}}},
		{Host: "*.wild.example", Path: "/v[0-9]+/.*", PathType: lbmodel.PathRegex, FixedStatus: 500},
		{Path: "/old", PathType: lbmodel.PathExact, Redirect: &lbmodel.Redirect{Scheme: "https", Hostname: "new.example", Port: 8443,
			StatusCode: 301, Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/new"}}},
		{Path: "/", PathType: lbmodel.PathPrefix, Redirect: &lbmodel.Redirect{Scheme: "http", StatusCode: 302}, Order: 4},
		{Path: "/split", PathType: lbmodel.PathExact, RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-Rule", Value: "r"}}},
			Backends: []lbmodel.RuleBackend{
				{Pool: "c1--ns-gw-a", Weight: 3, RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "Backend", Value: "it's a"}}}},
				{Weight: 1},
				{Pool: "c1--ns-gw-grpc", Weight: 2, RequestHeaders: &lbmodel.HeaderFilter{Remove: []string{"X-Rule"}}},
			}},
		// CORS with origins, header names holding what HAProxy treats
		// specially (a quote, %, #, |), and with a wildcard everywhere.
		{Path: "/cors", PathType: lbmodel.PathPrefix, Pool: "c1--ns-gw-a", CORS: &lbmodel.CORS{
			AllowOrigins: []string{"https://*.bar.com", "https://www.foo.com"}, AllowCredentials: true, AllowMethods: []string{"GET", "OPTIONS"},
			AllowHeaders: []string{"x-it's", "x-100%"}, ExposeHeaders: []string{"*", "x-#|"}, MaxAgeSeconds: 3600}},
		{Path: "/any", PathType: lbmodel.PathPrefix, FixedStatus: 500, CORS: &lbmodel.CORS{
			AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, ExposeHeaders: []string{"*"}, MaxAgeSeconds: 5}},
	}
}

func sorted(p Proxies) Proxies {
	p.Frontends = slices.Clone(p.Frontends)
	p.Backends = slices.Clone(p.Backends)
	slices.SortFunc(p.Frontends, func(a, b Frontend) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(p.Backends, func(a, b Backend) int { return strings.Compare(a.Name, b.Name) })
	return p
}

func TestRender_parseReadsBackWhatWasRendered(t *testing.T) {
	in := sampleProxies()
	r := Render(testGlobals, in)
	got, err := Parse(r.Text)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(in), got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("Parse(Render) (-want +got):\n%s", diff)
	}
}

func TestRender_frameIgnoresMembers(t *testing.T) {
	g := testGlobals
	a := sampleProxies()
	b := sampleProxies()
	b.Backends[0].Members = append(slices.Clone(b.Backends[0].Members), lbmodel.Member{IP: "198.18.0.13", Port: 61003, Enabled: true})
	b.Backends[0].Members[0].Enabled = false
	ra, rb := Render(g, a), Render(g, b)
	if ra.Frame != rb.Frame {
		t.Errorf("member changes changed the frame:\n%s\n---\n%s", ra.Frame, rb.Frame)
	}
	if string(ra.Text) == string(rb.Text) {
		t.Error("member changes did not change the configuration")
	}
	// The invalid share is a server too: it comes, goes and changes
	// weight at runtime.
	for _, w := range []int32{0, 1, 256} {
		e := sampleProxies()
		e.Backends[7].InvalidWeight = w
		if re := Render(g, e); re.Frame != ra.Frame || string(re.Text) == string(ra.Text) {
			t.Errorf("invalid weight %d: the frame changed, or the configuration did not", w)
		}
	}
	c := sampleProxies()
	c.Frontends[1].Port = 8443
	if Render(g, c).Frame == ra.Frame {
		t.Error("a new port did not change the frame")
	}
	d := sampleProxies()
	d.Frontends[3].Rules = d.Frontends[3].Rules[1:]
	if Render(g, d).Frame == ra.Frame {
		t.Error("a removed rule did not change the frame")
	}
}

func TestRender_rulesAsHAProxyConditions(t *testing.T) {
	text := string(Render(testGlobals, sampleProxies()).Text)
	for _, want := range []string{
		"    acl npl_r0_host 'req.hdr(host),regsub(:[0-9]+$,),lower' -m str -- 'a.example.com'\n",
		"    acl npl_r0_path path -m str -- '/api'\n",
		"    http-request set-var(txn.npl_rule) int(0) if !{ var(txn.npl_rule) -m found } npl_r0_host npl_r0_path\n",
		"    acl npl_r1_host 'req.hdr(host),regsub(:[0-9]+$,),lower' -m reg -- '^[^.]+\\.example\\.com$'\n",
		"    acl npl_r1_path path -m str -- '/shop'\n",
		"    acl npl_r1_path path_beg -- '/shop/'\n",
		"    http-request set-var(txn.npl_rule) int(2) if !{ var(txn.npl_rule) -m found }\n",
		"    use_backend c1--ns-ing-L7-ns-api-80 if npl_sel0\n",
		"    use_backend c1--ns-ing-L7-ns-web-80 if npl_sel2\n",
		// The Gateway frontend.
		"    acl npl_r0_method method -m str -- 'GET'\n",
		"    acl npl_r0_h0 'req.fhdr(x-it\\'\\''s)' -m str -- 'it'\\''s \"a\" \\ %x} #y'\n",
		"    acl npl_r0_q0 'url_param(q)' -m reg -- '^(?:^-v[0-9])$'\n",
		"    http-request set-header 'X-S' 'a b 100%% \"q\"' if npl_sel0\n",
		"    http-request add-header 'X-A' 'v' if npl_sel0\n",
		"    http-request del-header 'X-R' if npl_sel0\n",
		"    http-request set-header host 'rewritten.example' if npl_sel0\n",
		"    acl npl_r0_prefix path -m str -- '/app'\n",
		"    http-request set-path '/' if npl_sel0 npl_r0_prefix\n",
		"    http-request replace-path '^/app(/.*)$' '\\1' if npl_sel0 !npl_r0_prefix\n",
		"    acl npl_r1_path path -m reg -- '^(?:/v[0-9]+/.*)$'\n",
		// A Gateway's wildcard is one or more labels; an Ingress's one (above).
		"    acl npl_r1_host 'req.hdr(host),regsub(:[0-9]+$,),lower' -m reg -- '^.+\\.wild\\.example$'\n",
		"    http-request return status 500 if npl_sel1\n",
		"    http-request set-path '/new' if npl_sel2\n",
		"    http-request redirect location 'https://new.example:8443%[pathq]' code 301 if npl_sel2\n",
		"    http-request redirect location 'http://%[req.hdr(host),regsub(:[0-9]+$,)]%[pathq]' code 302 if npl_sel3\n",
		"    http-request return status 404 if !{ var(txn.npl_rule) -m found }\n",
		"    http-after-response set-header 'X-Resp' 'r' if npl_sel0\n",
		"    use_backend c1--ns-gw-a if npl_sel0\n",
		// A rule that splits its requests between backends: a number drawn
		// below the sum of the weights picks one, the rule's header filter
		// runs before the backend's.
		"    http-request set-header 'X-Rule' 'r' if npl_sel4\n" +
			"    http-request set-var(txn.npl_pick) rand(6) if npl_sel4\n" +
			"    acl npl_pick4_0 var(txn.npl_pick) -m int 0:2\n" +
			"    http-request set-header 'Backend' 'it'\\''s a' if npl_sel4 npl_pick4_0\n" +
			"    acl npl_pick4_1 var(txn.npl_pick) -m int 3:3\n" +
			"    http-request return status 500 if npl_sel4 npl_pick4_1\n" +
			"    acl npl_pick4_2 var(txn.npl_pick) -m int 4:5\n" +
			"    http-request del-header 'X-Rule' if npl_sel4 npl_pick4_2\n",
		"    use_backend c1--ns-gw-a if npl_sel4 npl_pick4_0\n    use_backend c1--ns-gw-grpc if npl_sel4 npl_pick4_2\n",
		// CORS: the allowed Origin kept, a preflight answered 204 by
		// HAProxy, the headers added after the response, those of a
		// preflight only to a preflight from an allowed origin.
		"    acl npl_sel5 var(txn.npl_rule) -m int 5\n" +
			"    acl npl_cors5_origin 'req.fhdr(origin),lower' -m reg -- '^https://([a-z0-9-]+\\.)+bar\\.com(:443)?$' '^https://www\\.foo\\.com(:443)?$'\n" +
			"    http-request set-var(txn.npl_cors_origin) req.fhdr(origin) if npl_sel5 npl_cors5_origin\n" +
			"    http-request set-var(txn.npl_cors_method) req.fhdr(access-control-request-method) if npl_sel5 " + corsPreflight + " { var(txn.npl_cors_origin) -m found }\n" +
			"    http-request set-var(txn.npl_cors_headers) req.fhdr(access-control-request-headers) if npl_sel5 " + corsPreflight +
			" { var(txn.npl_cors_origin) -m found } { req.hdr(access-control-request-headers) -m found }\n" +
			"    http-request return status 204 if npl_sel5 " + corsPreflight + "\n",
		"    http-after-response add-header vary origin if npl_sel5\n" +
			"    http-after-response set-header access-control-allow-origin '%[var(txn.npl_cors_origin)]' if npl_sel5 { var(txn.npl_cors_origin) -m found }\n" +
			"    http-after-response set-header access-control-allow-credentials true if npl_sel5 { var(txn.npl_cors_origin) -m found }\n" +
			"    http-after-response set-header access-control-expose-headers 'x-#|' if npl_sel5 { var(txn.npl_cors_origin) -m found }\n" +
			"    http-after-response set-header access-control-allow-methods 'GET, OPTIONS' if npl_sel5 { var(txn.npl_cors_method) -m found }\n" +
			"    http-after-response set-header access-control-allow-headers 'x-it'\\''s, x-100%%' if npl_sel5 { var(txn.npl_cors_method) -m found }\n" +
			"    http-after-response set-header access-control-max-age 3600 if npl_sel5 { var(txn.npl_cors_method) -m found }\n",
		// Any origin; the method and headers asked for are answered.
		"    acl npl_cors6_origin req.hdr(origin) -m found\n",
		"    http-request return status 204 if npl_sel6 " + corsPreflight + "\n    http-request return status 500 if npl_sel6\n",
		"    http-after-response set-header access-control-expose-headers '*' if npl_sel6 { var(txn.npl_cors_origin) -m found }\n" +
			"    http-after-response set-header access-control-allow-methods '%[var(txn.npl_cors_method)]' if npl_sel6 { var(txn.npl_cors_method) -m found }\n" +
			"    http-after-response set-header access-control-allow-headers '%[var(txn.npl_cors_headers)]' if npl_sel6 { var(txn.npl_cors_method) -m found } { var(txn.npl_cors_headers) -m found }\n",
		"    server 198.18.0.11_61005 198.18.0.11:61005 check inter 2000ms fall 2 rise 1 weight 70\n",
		// HTTPS offers HTTP/2; an h2c pool speaks it to its members.
		"    bind 198.18.200.3:8443 ssl crt '/run/tls/a b.pem' crt '/run/tls/b.pem' alpn h2,http/1.1\n",
		"    server 198.18.0.11_61006 198.18.0.11:61006 check inter 2000ms fall 2 rise 1 proto h2\n",
		// The invalid share of a pool (even an h2c one: HAProxy speaks
		// HTTP/1.1 to the frontend that answers 500).
		"    server npl_invalid unix@/run/500.sock weight 3\n",
		"frontend npl_invalid\n    mode http\n    bind unix@/run/500.sock mode 600\n    http-request return status 500\n",
		// A Gateway's TCP listener; TLS listeners route by SNI.
		"    description npl cluster=c1 lb=c1--ns-gw service= gateway=ns/gw listener=TCP\n",
		"    default_backend c1--ns-gw-TCP-9000\n",
		"    tcp-request inspect-delay 5s\n",
		"    tcp-request content accept if { req.ssl_hello_type 1 }\n",
		"    acl npl_s0 'req.ssl_sni,lower' -m str -- 'a.example'\n",
		"    use_backend c1--ns-gw-a:tls if npl_s0\n",
		"    acl npl_s1 'req.ssl_sni,lower' -m reg -- '^.+\\.it'\\''s\\.example$'\n",
		"    use_backend c1--ns-gw-a:tls\n",
		"    bind 198.18.200.3:9443 ssl crt '/run/tls/b.pem'\n",
		"    acl npl_s0 'ssl_fc_sni,lower' -m str -- 't.example'\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, text)
		}
	}
	// The Ingress frontend has a default backend: no 404 of its own.
	ing := text[strings.Index(text, "frontend c1--ns-ing-L7-HTTP-80"):strings.Index(text, "frontend c1--ns-v6-TCP-80")]
	if strings.Contains(ing, "return status 404") {
		t.Errorf("a frontend with a default backend answers 404 itself:\n%s", ing)
	}
}

func TestRender_linesNameTheirObject(t *testing.T) {
	r := Render(testGlobals, sampleProxies())
	lines := strings.Split(string(r.Text), "\n")
	for n, obj := range r.Objects {
		line := lines[n-1]
		if !strings.Contains(obj, "c1--ns-") {
			t.Errorf("line %d %q: object %q", n, line, obj)
		}
	}
	if len(r.Objects) == 0 {
		t.Fatal("no line is mapped to an object")
	}
}

// TestRender_haproxyAcceptsIt checks the rendered configuration with the
// real haproxy -c.
func TestRender_haproxyAcceptsIt(t *testing.T) {
	bin := haproxyBin(t)
	dir := t.TempDir()
	px := sampleWithCertsIn(t, dir)
	r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), InvalidSocket: filepath.Join(dir, "500.sock"), Checks: DefaultChecks}, px)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), bin, path); err != nil {
		t.Fatalf("haproxy refused the rendered configuration: %v\n%s", err, r.Text)
	}

	bad := sampleProxies()
	bad.Frontends[1].Name = "c1--ns-web-TCP{443"
	r = Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), InvalidSocket: filepath.Join(dir, "500.sock"), Checks: DefaultChecks}, bad)
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	err := Check(context.Background(), bin, path)
	ce, ok := err.(*CheckError)
	if !ok {
		t.Fatalf("Check of an illegal proxy name: got %v, want a *CheckError", err)
	}
	var named bool
	for _, n := range ce.Lines() {
		named = named || strings.Contains(r.Objects[n], "c1--ns-web-TCP{443")
	}
	if !named {
		t.Errorf("the lines HAProxy names (%v) do not map to the bad proxy:\n%s", ce.Lines(), ce.Output)
	}
}

// sampleWithCertsIn is sampleProxies with its certificates written to dir,
// for HAProxy to load.
func sampleWithCertsIn(t *testing.T, dir string) Proxies {
	t.Helper()
	px := sampleProxies()
	for i := range px.Backends {
		if b := &px.Backends[i]; b.CAFile != "" {
			b.CAFile = filepath.Join(dir, "the CA's #1.pem")
			cert, _ := pem.Decode(selfSigned(t))
			if err := os.WriteFile(b.CAFile, pem.EncodeToMemory(cert), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range px.Frontends {
		if ca := px.Frontends[i].ClientCA; ca != nil {
			ca.Path = filepath.Join(dir, filepath.Base(ca.Path))
			cert, _ := pem.Decode(selfSigned(t))
			if err := os.WriteFile(ca.Path, pem.EncodeToMemory(cert), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for j := range px.Frontends[i].Certificates {
			c := &px.Frontends[i].Certificates[j]
			c.Path = filepath.Join(dir, filepath.Base(c.Path))
			if err := os.WriteFile(c.Path, selfSigned(t), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return px
}

// selfSigned is a self-signed certificate and its key, PEM.
func selfSigned(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a.example"}, DNSNames: []string{"a.example"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})...)
}

// An HTTPS frontend that validates its clients' certificates binds with
// its CA file and verify required, or with AllowInsecureFallback's
// optional verification that ignores every error of the client's chain;
// Parse reads the validation back, and HAProxy accepts both.
func TestRender_clientValidationOnTheBind(t *testing.T) {
	bin := haproxyBin(t)
	for _, tc := range []struct {
		optional bool
		want     string
	}{
		{false, " alpn h2,http/1.1 ca-file '/run/ca/it'\\''s.pem' verify required"},
		{true, " alpn h2,http/1.1 ca-file '/run/ca/it'\\''s.pem' verify optional ca-ignore-err all crt-ignore-err all"},
	} {
		px := sampleProxies()
		f := &px.Frontends[4]
		f.ClientCA = &ClientCA{Path: "/run/ca/it's.pem", Validation: lbmodel.ClientValidation{CACertPEM: "x\n#y", Optional: tc.optional}}
		text := string(Render(testGlobals, px).Text)
		i := strings.Index(text, "    bind 198.18.200.3:8443 ssl")
		if i < 0 {
			t.Fatalf("no bind of %s:\n%s", f.Name, text)
		}
		bind, _, _ := strings.Cut(text[i:], "\n")
		if !strings.HasSuffix(bind, tc.want) {
			t.Errorf("optional=%v: bind %q, want it to end with %q", tc.optional, bind, tc.want)
		}
		got, err := Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sorted(px), got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("optional=%v: Parse(Render) (-want +got):\n%s", tc.optional, diff)
		}

		dir := t.TempDir()
		px = sampleWithCertsIn(t, dir)
		ca := filepath.Join(dir, "client CA.pem")
		cert, _ := pem.Decode(selfSigned(t))
		if err := os.WriteFile(ca, pem.EncodeToMemory(cert), 0o600); err != nil {
			t.Fatal(err)
		}
		px.Frontends[4].ClientCA = &ClientCA{Path: ca, Validation: lbmodel.ClientValidation{CACertPEM: "x", Optional: tc.optional}}
		r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), InvalidSocket: filepath.Join(dir, "500.sock"), Checks: DefaultChecks}, px)
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, r.Text, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Check(context.Background(), bin, path); err != nil {
			t.Errorf("optional=%v: haproxy refused the rendered configuration: %v", tc.optional, err)
		}
	}
}

func TestParseServersState(t *testing.T) {
	out := `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 be1 1 127.0.0.1_18081 127.0.0.1 2 4 1 1 0 1 0 1 6 0 0 0 - 18081 - 0 0 - - 0
3 be1 2 127.0.0.1_18082 127.0.0.1 2 8 1 1 0 1 0 0 6 0 0 0 - 18082 - 0 0 - - 0
3 be1 3 127.0.0.1_18083 127.0.0.1 0 5 1 1 0 1 0 0 6 0 0 0 - 18083 - 0 0 - - 0
3 be1 4 npl_invalid - 2 0 7 7 0 1 0 2 0 0 0 0 - 0 - 0 0 - - 0

`
	got, err := ParseServersState(out)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name             string
		port             int32
		up, enabled, dra bool
	}
	var rows []row
	for _, s := range got {
		rows = append(rows, row{s.Name, s.Port, s.Up, s.Enabled(), s.Draining()})
	}
	want := []row{
		{"127.0.0.1_18081", 18081, true, true, false},   // configured disabled, then set ready
		{"127.0.0.1_18082", 18082, true, false, true},   // draining
		{"127.0.0.1_18083", 18083, false, false, false}, // in maintenance
		{"npl_invalid", 0, true, true, false},           // on a unix socket: no address
	}
	if diff := cmp.Diff(want, rows, cmp.AllowUnexported(row{})); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestParseShowProc(t *testing.T) {
	out := `#<PID>          <type>          <reloads>       <uptime>        <version>
11510           master          1 [failed: 2]   0d00h00m02s     2.6.12-1+deb12u4
# workers
11613           worker          0               0d00h00m01s     2.6.12-1+deb12u4
11517           worker          1               0d00h00m03s     2.6.12-1+deb12u4
# programs
`
	procs, err := ParseShowProc(out)
	if err != nil {
		t.Fatal(err)
	}
	if procs[0].Type != "master" || procs[0].Reloads != 1 || procs[0].Failed != 2 {
		t.Errorf("master: %+v", procs[0])
	}
	if w := CurrentWorker(procs); w != 11613 {
		t.Errorf("current worker %d, want 11613", w)
	}
	// After a failed reload the old worker, which lived through it, is
	// the one that serves.
	failed, err := ParseShowProc("#<PID> <type> <reloads>\n10 master 1 [failed: 1] 0d 2.6\n# workers\n11 worker 1 0d 2.6\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := CurrentWorker(failed); w != 11 {
		t.Errorf("current worker after a failed reload %d, want 11", w)
	}
	if _, err := ParseShowProc("Unknown command\n"); err == nil {
		t.Error("an answer without a master parsed")
	}
}

// An HTTPS frontend of several Gateway listeners selects a listener by
// the TLS server name and another by the Host header (port left out, any
// case), each the first hostname that matches, most specific first, a
// wildcard one or more labels, no hostname every name; a request whose two
// differ is answered 421 before any rule. Parse reads the hostnames back,
// and HAProxy accepts the lines.
func TestRender_misdirectedRequestsAnswered421(t *testing.T) {
	bin := haproxyBin(t)
	hosts := []string{"a.example", "*.example", ""}
	px := sampleProxies()
	px.Frontends[4].Hostnames = hosts
	text := string(Render(testGlobals, px).Text)
	want := `    # npl hostnames ["a.example","*.example",""]
    acl npl_l0_sni 'ssl_fc_sni,lower' -m str -- 'a.example'
    acl npl_l0_host 'req.hdr(host),regsub(:[0-9]+$,),lower' -m str -- 'a.example'
    http-request set-var(txn.npl_sni_listener) int(0) if !{ var(txn.npl_sni_listener) -m found } npl_l0_sni
    http-request set-var(txn.npl_host_listener) int(0) if !{ var(txn.npl_host_listener) -m found } npl_l0_host
    acl npl_l1_sni 'ssl_fc_sni,lower' -m reg -- '^.+\.example$'
    acl npl_l1_host 'req.hdr(host),regsub(:[0-9]+$,),lower' -m reg -- '^.+\.example$'
    http-request set-var(txn.npl_sni_listener) int(1) if !{ var(txn.npl_sni_listener) -m found } npl_l1_sni
    http-request set-var(txn.npl_host_listener) int(1) if !{ var(txn.npl_host_listener) -m found } npl_l1_host
    http-request set-var(txn.npl_sni_listener) int(2) if !{ var(txn.npl_sni_listener) -m found } { ssl_fc_sni -m found }
    http-request set-var(txn.npl_host_listener) int(2) if !{ var(txn.npl_host_listener) -m found }
    http-request return status 421 if { var(txn.npl_sni_listener) -m found } { var(txn.npl_host_listener) -m found } !{ var(txn.npl_sni_listener),sub(txn.npl_host_listener) -m int 0 }
    # npl rule `
	if !strings.Contains(text, want) {
		t.Errorf("rendered configuration lacks the check before the rules:\n%s\nwant:\n%s", text, want)
	}
	got, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(px), got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("Parse(Render) (-want +got):\n%s", diff)
	}

	dir := t.TempDir()
	px = sampleWithCertsIn(t, dir)
	px.Frontends[4].Hostnames = hosts
	r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), InvalidSocket: filepath.Join(dir, "500.sock"), Checks: DefaultChecks}, px)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), bin, path); err != nil {
		t.Errorf("haproxy refused the rendered configuration: %v", err)
	}
}
