package lbmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gatewayL7 is a valid model with every field Gateway API routes fill.
func gatewayL7() *LoadBalancer {
	lb := validL7()
	lb.Gateway = "shop/gw"
	lb.Listeners = append(lb.Listeners, Listener{Port: 8443, Protocol: HTTPS})
	lb.Pools = append(lb.Pools, Pool{Name: "q", Members: []Member{
		{IP: "198.18.0.12", Port: 61000, Enabled: true, Weight: 70},
		{IP: "198.18.0.11", Port: 61001, Enabled: true, Weight: 1},
	}, InvalidWeight: 30})
	other := []byte("-----BEGIN CERTIFICATE-----\nb3RoZXI=\n-----END CERTIFICATE-----\n")
	lb.HTTP.TLS[0].Ports = []int32{443}
	lb.HTTP.TLS = append(lb.HTTP.TLS, TLSCert{Secret: "shop/other", Hosts: []string{}, Ports: []int32{8443, 443},
		Fingerprint: CertFingerprint(other), CertPEM: other, KeyPEM: []byte("k")})
	lb.HTTP.Rules = append(lb.HTTP.Rules,
		Rule{Path: "/", PathType: PathPrefix, Pool: "q", Ports: []int32{443, 80}, Method: "GET",
			Headers:         []ValueMatch{{Name: "X-B", Value: "b"}, {Name: "x-a", Value: "a.*", Regex: true}},
			Query:           []ValueMatch{{Name: "z", Value: "1"}, {Name: "a", Value: "2"}},
			RequestHeaders:  &HeaderFilter{Set: []Header{{Name: "X-S", Value: "a b \"c\""}}, Add: []Header{}, Remove: []string{"X-R", "x-q"}},
			ResponseHeaders: &HeaderFilter{Set: []Header{}, Add: []Header{}, Remove: []string{}},
			Rewrite:         &Rewrite{Hostname: "rewritten.example", Path: &PathModifier{Type: ReplacePrefixMatch, Value: "/"}}, Order: 2,
			CORS: &CORS{AllowOrigins: []string{"https://*.Example.com", "http://a.example:8080"}, AllowCredentials: true,
				AllowMethods: []string{"PUT", "GET"}, AllowHeaders: []string{"x-b", "X-A"}, ExposeHeaders: []string{"*"}, MaxAgeSeconds: 5}},
		Rule{Path: "/old", PathType: PathPrefix, Ports: []int32{8443},
			Redirect: &Redirect{Scheme: "https", Hostname: "new.example", Port: 8443, StatusCode: 301,
				Path: &PathModifier{Type: ReplacePrefixMatch, Value: "/new"}}},
		Rule{Path: "/v[0-9]+/.*", PathType: PathRegex, FixedStatus: 500},
		Rule{Path: "/", PathType: PathPrefix, Pool: "p", Headers: []ValueMatch{}, Query: []ValueMatch{}, Order: 1},
	)
	return lb
}

// gatewayStreams is a valid Gateway model with every kind of listener: TCP
// and UDP with pools of their own (weighted), TLS passthrough and
// terminating with SNI routes, and an h2c pool.
func gatewayStreams() *LoadBalancer {
	lb := gatewayL7()
	lb.Pools[1].AppProtocol = AppProtocolH2C
	lb.Pools[1].InvalidWeight = 0 // SNI routes name q: a TLS connection is answered no status
	lb.Pools = append(lb.Pools, Pool{Name: "tls-a", Members: []Member{{IP: "198.18.0.13", Port: 61002, Enabled: true}}})
	lb.Listeners = append(lb.Listeners,
		Listener{Port: 9000, Protocol: TCP, Pool: Pool{Name: "tcp-9000", Members: []Member{
			{IP: "198.18.0.12", Port: 61003, Enabled: true, Weight: 30}, {IP: "198.18.0.11", Port: 61003, Enabled: true, Weight: 70}}}},
		Listener{Port: 9000, Protocol: UDP, Pool: Pool{Name: "udp-9000"}},
		Listener{Port: 8883, Protocol: TLS, SNI: []SNIRoute{
			{Pool: "p"}, {Host: "*.example.com", Pool: "q"}, {Host: "a.example.com", Pool: "tls-a"}, {Host: "*.a.example.com", Pool: "p"}}},
		Listener{Port: 9443, Protocol: TLS, Terminate: true, SNI: []SNIRoute{{Host: "t.example.com", Pool: "tls-a"}}},
	)
	lb.HTTP.TLS[1].Ports = append(lb.HTTP.TLS[1].Ports, 9443)
	return lb
}

func TestNormalize_gatewayStreamListeners(t *testing.T) {
	in := gatewayStreams()
	before := in.Clone()
	got, err := Normalize(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, in); diff != "" {
		t.Errorf("Normalize modified its argument (-before +after):\n%s", diff)
	}
	var protos []string
	for _, l := range got.Listeners {
		protos = append(protos, fmt.Sprintf("%s/%d", l.Protocol, l.Port))
	}
	if diff := cmp.Diff([]string{"HTTP/80", "HTTPS/443", "HTTPS/8443", "TCP/9000", "TLS/8883", "TLS/9443", "UDP/9000"}, protos); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	tcp := got.Listeners[3].Pool
	if tcp.Members[0].IP != "198.18.0.11" || tcp.Members[0].Weight != 70 || got.Listeners[6].Pool.Members == nil {
		t.Errorf("TCP pool %+v, UDP pool %+v: want sorted members with weights, never nil", tcp, got.Listeners[6].Pool)
	}
	want := []SNIRoute{{Host: "a.example.com", Pool: "tls-a"}, {Host: "*.a.example.com", Pool: "p"}, {Host: "*.example.com", Pool: "q"}, {Pool: "p"}}
	if diff := cmp.Diff(want, got.Listeners[4].SNI); diff != "" {
		t.Errorf("SNI routes (-want +got):\n%s", diff)
	}
	again, err := Normalize(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("Normalize is not idempotent (-once +twice):\n%s", diff)
	}
	if err := IngressSubset(got); !errors.Is(err, ErrUnsupported) {
		t.Errorf("IngressSubset = %v, want ErrUnsupported", err)
	}
	h2c := validL7()
	h2c.Pools[0].AppProtocol = AppProtocolH2C
	if err := IngressSubset(h2c); !errors.Is(err, ErrUnsupported) {
		t.Errorf("IngressSubset(h2c pool) = %v, want ErrUnsupported", err)
	}
}

func TestNormalize_terminatingTLSWithoutHTTPS(t *testing.T) {
	// A Gateway with a terminating TLS listener only: its certificate
	// serves no HTTPS listener, and needs none.
	lb := gatewayStreams()
	lb.Listeners = []Listener{{Port: 9443, Protocol: TLS, Terminate: true, SNI: []SNIRoute{{Host: "t.example.com", Pool: "p"}}}}
	lb.HTTP = &HTTPRoutes{TLS: []TLSCert{lb.HTTP.TLS[1]}}
	lb.HTTP.TLS[0].Ports = []int32{9443}
	if _, err := Normalize(lb); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	lb.Listeners[0].Terminate = false
	if _, err := Normalize(lb); err == nil || !strings.Contains(err.Error(), "port 9443 is not an HTTPS listener nor a terminating TLS listener") {
		t.Errorf("Normalize(a certificate for a passthrough listener) = %v", err)
	}
}

func TestNormalize_rejectsInvalidGatewayStreams(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*LoadBalancer)
		want string
	}{
		{"a TCP listener in an Ingress's", func(lb *LoadBalancer) { lb.Gateway = "" }, "TLS, TCP and UDP only in a Gateway's"},
		{"an SCTP listener", func(lb *LoadBalancer) { lb.Listeners[3].Protocol = "SCTP" }, `protocol "SCTP" is not HTTP, HTTPS, TLS, TCP or UDP`},
		{"a TCP port of an HTTP listener", func(lb *LoadBalancer) { lb.Listeners[3].Port = 80 }, "TCP/80: given twice"},
		{"a TLS port of an HTTPS listener", func(lb *LoadBalancer) { lb.Listeners[4].Port = 443 }, "given twice"},
		{"a TCP pool without a name", func(lb *LoadBalancer) { lb.Listeners[3].Pool.Name = "" }, "TCP/9000: pool has no name"},
		{"a TCP pool of two listeners", func(lb *LoadBalancer) { lb.Listeners[6].Pool.Name = "tcp-9000" }, "used by another listener"},
		{"a TCP pool that is a shared pool", func(lb *LoadBalancer) { lb.Listeners[3].Pool.Name = "p" }, "pool p is also a shared pool"},
		{"a TCP pool with an appProtocol", func(lb *LoadBalancer) { lb.Listeners[3].Pool.AppProtocol = AppProtocolH2C }, "has no appProtocol"},
		{"a TCP member weight 257", func(lb *LoadBalancer) { lb.Listeners[3].Pool.Members[0].Weight = 257 }, "weight 257 out of 0-256"},
		{"a TCP listener with SNI", func(lb *LoadBalancer) { lb.Listeners[3].SNI = []SNIRoute{{Pool: "p"}} }, "only a TLS listener has SNI routes"},
		{"an HTTPS listener that terminates", func(lb *LoadBalancer) { lb.Listeners[1].Terminate = true }, "only a TLS listener"},
		{"a TLS listener with a pool", func(lb *LoadBalancer) { lb.Listeners[4].Pool.Name = "p" }, "TLS/8883: no pool of its own"},
		{"an SNI bad host", func(lb *LoadBalancer) { lb.Listeners[4].SNI[0].Host = "a.*.com" }, `SNI host "a.*.com" is not a host name`},
		{"an SNI host with a newline", func(lb *LoadBalancer) { lb.Listeners[4].SNI[0].Host = "a\nb" }, "is not a host name"},
		{"an SNI host twice", func(lb *LoadBalancer) { lb.Listeners[4].SNI[0].Host = "*.example.com" }, `SNI host "*.example.com" given twice`},
		{"an SNI route without pool", func(lb *LoadBalancer) { lb.Listeners[4].SNI[0].Pool = "" }, "has no pool"},
		{"an SNI route to an unknown pool", func(lb *LoadBalancer) { lb.Listeners[4].SNI[0].Pool = "tcp-9000" }, "pool tcp-9000 is not one of the pools"},
		{"a terminating TLS listener without certificate", func(lb *LoadBalancer) { lb.HTTP.TLS[1].Ports = []int32{443, 8443} }, "listener TLS/9443: no TLS certificate serves it"},
		{"a certificate for a passthrough listener", func(lb *LoadBalancer) { lb.HTTP.TLS[1].Ports = append(lb.HTTP.TLS[1].Ports, 8883) }, "port 8883 is not an HTTPS listener nor a terminating TLS listener"},
		{"a rule on a TLS port", func(lb *LoadBalancer) { lb.HTTP.Rules[0].Ports = []int32{8883} }, "port 8883 is not an HTTP or HTTPS listener"},
		{"a rule on a TCP port", func(lb *LoadBalancer) { lb.HTTP.Rules[0].Ports = []int32{9000} }, "port 9000 is not an HTTP or HTTPS listener"},
		{"an unknown appProtocol", func(lb *LoadBalancer) { lb.Pools[0].AppProtocol = "h2" }, `pool p: appProtocol "h2" is not empty or h2c`},
		{"an invalid weight 257", func(lb *LoadBalancer) { lb.Pools[2].InvalidWeight = 257 }, "pool tls-a: invalid weight 257 out of 0-256"},
		{"a negative invalid weight", func(lb *LoadBalancer) { lb.Pools[2].InvalidWeight = -1 }, "invalid weight -1 out of 0-256"},
		{"an invalid share of a TCP pool", func(lb *LoadBalancer) { lb.Listeners[3].Pool.InvalidWeight = 1 },
			"pool tcp-9000: invalid weight 1: only a pool of a Gateway's HTTP rules answers a share of its requests 500"},
		{"an invalid share of a UDP pool", func(lb *LoadBalancer) { lb.Listeners[6].Pool.InvalidWeight = 1 }, "pool udp-9000: invalid weight 1: only"},
		{"an invalid share of an SNI route's pool", func(lb *LoadBalancer) { lb.Pools[2].InvalidWeight = 1 },
			`listener TLS/8883: SNI host "a.example.com": pool tls-a has an invalid share: a TLS connection cannot be answered 500`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := gatewayStreams()
			SortListeners(lb.Listeners)
			tt.mod(lb)
			got, err := Normalize(lb)
			var invalid *InvalidModelError
			if got != nil || !errors.As(err, &invalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Normalize = %v, want an *InvalidModelError containing %q", err, tt.want)
			}
		})
	}
	l4 := validL4()
	l4.Listeners[0].Terminate = true
	if _, err := Normalize(l4); err == nil || !strings.Contains(err.Error(), "only a TLS listener") {
		t.Errorf("Normalize(L4 that terminates) = %v", err)
	}
	l4 = validL4()
	l4.Listeners[0].Pool.AppProtocol = AppProtocolH2C
	if _, err := Normalize(l4); err == nil || !strings.Contains(err.Error(), "an L4 pool has no appProtocol") {
		t.Errorf("Normalize(L4 h2c pool) = %v", err)
	}
}

func TestSortSNI(t *testing.T) {
	routes := []SNIRoute{{Pool: "all"}, {Host: "*.b.example", Pool: "w1"}, {Host: "a.example", Pool: "e1"},
		{Host: "*.a.b.example", Pool: "w2"}, {Host: "bb.example", Pool: "e2"}}
	SortSNI(routes)
	var got []string
	for _, r := range routes {
		got = append(got, r.Pool)
	}
	if diff := cmp.Diff([]string{"e2", "e1", "w2", "w1", "all"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestNormalize_gatewayFieldsInCanonicalForm(t *testing.T) {
	in := gatewayL7()
	before := in.Clone()
	got, err := Normalize(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, in); diff != "" {
		t.Errorf("Normalize modified its argument (-before +after):\n%s", diff)
	}
	q := got.Pools[1]
	if q.Members[0].Weight != 0 || q.Members[1].Weight != 70 || q.InvalidWeight != 30 {
		t.Errorf("weights %+v, invalid weight %d: want weight 1 as 0 (the same), 70 and the invalid weight 30 kept", q.Members, q.InvalidWeight)
	}
	// A pool of invalid backends only answers 500 to every request.
	invalidOnly := in.Clone()
	invalidOnly.Pools[1].Members, invalidOnly.Pools[1].InvalidWeight = nil, 1
	if n, err := Normalize(invalidOnly); err != nil || n.Pools[1].InvalidWeight != 1 || n.Pools[1].Members == nil {
		t.Errorf("Normalize(a pool without members with an invalid share) = %+v, %v", n.Pools[1], err)
	}
	if c := got.HTTP.TLS[0]; c.Secret != "shop/cert" || fmt.Sprint(c.Ports) != "[443]" || got.HTTP.TLS[1].Hosts != nil ||
		fmt.Sprint(got.HTTP.TLS[1].Ports) != "[443 8443]" {
		t.Errorf("TLS %v: want sorted by Secret, ports sorted, no empty hosts", got.HTTP.TLS)
	}
	var r Rule
	for _, x := range got.HTTP.Rules {
		if x.Method == "GET" {
			r = x
		}
	}
	want := Rule{Path: "/", PathType: PathPrefix, Pool: "q", Ports: []int32{80, 443}, Method: "GET",
		Headers:        []ValueMatch{{Name: "x-a", Value: "a.*", Regex: true}, {Name: "X-B", Value: "b"}},
		Query:          []ValueMatch{{Name: "a", Value: "2"}, {Name: "z", Value: "1"}},
		RequestHeaders: &HeaderFilter{Set: []Header{{Name: "X-S", Value: "a b \"c\""}}, Remove: []string{"x-q", "X-R"}},
		Rewrite:        &Rewrite{Hostname: "rewritten.example", Path: &PathModifier{Type: ReplacePrefixMatch, Value: "/"}}, Order: 2,
		CORS: &CORS{AllowOrigins: []string{"http://a.example:8080", "https://*.example.com"}, AllowCredentials: true,
			AllowMethods: []string{"GET", "PUT"}, AllowHeaders: []string{"X-A", "x-b"}, ExposeHeaders: []string{"*"}, MaxAgeSeconds: 5}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("rule (-want +got):\n%s", diff)
	}
	if !r.Equal(want) {
		t.Error("Equal is false for equal normalized rules")
	}
	again, err := Normalize(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("Normalize is not idempotent (-once +twice):\n%s", diff)
	}
	// A JSON round trip (how the edge and the mock keep models) changes nothing.
	b, _ := json.Marshal(got)
	var back LoadBalancer
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i := range back.HTTP.Rules {
		if !back.HTTP.Rules[i].Equal(got.HTTP.Rules[i]) {
			t.Errorf("rule %d after JSON: %+v, want %+v", i, back.HTTP.Rules[i], got.HTTP.Rules[i])
		}
	}
}

func TestSortRules_gatewayPrecedence(t *testing.T) {
	rules := []Rule{
		{Path: "/", PathType: PathPrefix, Pool: "p", Order: 1},
		{Path: "/", PathType: PathPrefix, Pool: "p", Order: 0, Ports: []int32{80}},
		{Path: "/", PathType: PathPrefix, Pool: "p", Query: []ValueMatch{{Name: "a"}}},
		{Path: "/", PathType: PathPrefix, Pool: "p", Headers: []ValueMatch{{Name: "a"}}},
		{Path: "/", PathType: PathPrefix, Pool: "p", Headers: []ValueMatch{{Name: "a"}, {Name: "b"}}},
		{Path: "/", PathType: PathPrefix, Pool: "p", Headers: []ValueMatch{{Name: "a"}}, Query: []ValueMatch{{Name: "a"}}},
		{Path: "/", PathType: PathPrefix, Pool: "p", Method: "GET"},
		{Path: "/a", PathType: PathPrefix, Pool: "p"},
		{Path: "/a.*", PathType: PathRegex, Pool: "p"},
		{Path: "/", PathType: PathExact, Pool: "p"},
		{Host: "a.example", Path: "/", PathType: PathPrefix, Pool: "p"},
	}
	SortRules(rules)
	var got []string
	for _, r := range rules {
		got = append(got, fmt.Sprintf("%s %s %s m=%s h=%d q=%d o=%d %v", r.Host, r.PathType, r.Path, r.Method, len(r.Headers), len(r.Query), r.Order, r.Ports))
	}
	want := []string{
		"a.example Prefix / m= h=0 q=0 o=0 []",
		" Exact / m= h=0 q=0 o=0 []",
		" RegularExpression /a.* m= h=0 q=0 o=0 []",
		" Prefix /a m= h=0 q=0 o=0 []",
		" Prefix / m=GET h=0 q=0 o=0 []",
		" Prefix / m= h=2 q=0 o=0 []",
		" Prefix / m= h=1 q=1 o=0 []",
		" Prefix / m= h=1 q=0 o=0 []",
		" Prefix / m= h=0 q=1 o=0 []",
		" Prefix / m= h=0 q=0 o=0 [80]",
		" Prefix / m= h=0 q=0 o=1 []",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// FuzzNormalize feeds arbitrary JSON models to Normalize (seeds in
// testdata/fuzz/FuzzNormalize, written by the test below). Whatever the
// model, Normalize must not panic; a model it accepts must be a fixed point
// (normalizing it again changes nothing) whose rules are in strict
// SortRules order.
func FuzzNormalize(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var lb LoadBalancer
		if json.Unmarshal(data, &lb) != nil {
			return
		}
		if lb.HTTP != nil {
			for i := range lb.HTTP.TLS { // keys never travel in JSON
				lb.HTTP.TLS[i].CertPEM, lb.HTTP.TLS[i].KeyPEM = testCert, []byte("k")
				lb.HTTP.TLS[i].Fingerprint = CertFingerprint(testCert)
			}
		}
		n, err := Normalize(&lb)
		if err != nil {
			return
		}
		again, err := Normalize(n)
		if err != nil {
			t.Fatalf("a normalized model is refused: %v", err)
		}
		if diff := cmp.Diff(n, again); diff != "" {
			t.Fatalf("Normalize is not idempotent (-once +twice):\n%s", diff)
		}
		if n.HTTP != nil {
			for i := 1; i < len(n.HTTP.Rules); i++ {
				if CompareRules(n.HTTP.Rules[i-1], n.HTTP.Rules[i]) >= 0 {
					t.Fatalf("rules %d and %d are not in strict SortRules order", i-1, i)
				}
			}
		}
	})
}

// TestFuzzNormalize_seedsAreCurrent checks that the seed corpus holds the
// models of validL4, validL7, gatewayL7 and gatewayStreams, so that the fuzzer starts from
// every field.
func TestFuzzNormalize_seedsAreCurrent(t *testing.T) {
	for name, model := range map[string]func() *LoadBalancer{"l4": validL4, "ingress-l7": validL7, "gateway-l7": gatewayL7, "gateway-streams": gatewayStreams} {
		b, err := json.Marshal(model())
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		path := filepath.Join("testdata", "fuzz", "FuzzNormalize", name)
		if os.Getenv("NPL_UPDATE_SEEDS") != "" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s is not the seed of %s (err %v); run NPL_UPDATE_SEEDS=1 go test -run TestFuzzNormalize_seedsAreCurrent ./providers", path, name, err)
		}
	}
}
