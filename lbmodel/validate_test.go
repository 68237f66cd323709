package lbmodel

import (
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("der")})

func validL4() *LoadBalancer {
	return &LoadBalancer{Name: "c1--shop-web", Service: "shop/web", Listeners: []Listener{
		{Port: 80, Protocol: TCP, Pool: Pool{Name: "c1--shop-web-TCP-80", Members: []Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}}},
		{Port: 53, Protocol: UDP, Pool: Pool{Name: "c1--shop-web-UDP-53", Members: []Member{{IP: "198.18.0.11", Port: 61001, Enabled: true}}}},
	}}
}

func validL7() *LoadBalancer {
	return &LoadBalancer{Name: "c1--shop-web-L7", Kind: L7,
		Listeners: []Listener{{Port: 80, Protocol: HTTP}, {Port: 443, Protocol: HTTPS}},
		Pools:     []Pool{{Name: "p", Members: []Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}}},
		HTTP: &HTTPRoutes{
			Rules:       []Rule{{Host: "*.example.com", Path: "/a", PathType: PathPrefix, Pool: "p"}},
			DefaultPool: "p",
			TLS:         []TLSCert{{Secret: "shop/cert", Fingerprint: CertFingerprint(testCert), CertPEM: testCert, KeyPEM: []byte("k")}},
		}}
}

func TestNormalize_rejectsInvalidModels(t *testing.T) {
	for _, lb := range []*LoadBalancer{validL4(), validL7()} {
		if _, err := Normalize(lb); err != nil {
			t.Fatalf("valid model %s: %v", lb.Name, err)
		}
	}
	tests := []struct {
		name  string
		valid func() *LoadBalancer
		mod   func(*LoadBalancer)
		want  string
	}{
		{"L4 no name", validL4, func(lb *LoadBalancer) { lb.Name = "" }, "no name"},
		// Names and owners are rendered as they are (HAProxy's proxy names
		// and descriptions, BIG-IP's, Avi's): a Service field with a newline
		// once added directives to HAProxy's configuration (REFERENCE 17).
		{"L4 a name with a newline", validL4, func(lb *LoadBalancer) { lb.Name = "c1--x\nfrontend evil" }, `name "c1--x\nfrontend evil" holds a character`},
		{"L4 a name with a blank", validL4, func(lb *LoadBalancer) { lb.Name = "c1--x y" }, "holds a character other than"},
		{"L4 a name with a brace", validL4, func(lb *LoadBalancer) { lb.Name = "c1--x{y" }, "holds a character other than"},
		{"L4 a pool name with a hash", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Pool.Name = "c1--x#y" }, `TCP/80: pool name "c1--x#y" holds a character`},
		{"L4 a Service with a newline", validL4, func(lb *LoadBalancer) {
			lb.Service = "shop/web\n    external-check command /bin/sh"
		}, "is not namespace/name of Kubernetes names"},
		{"L4 a Service with a blank", validL4, func(lb *LoadBalancer) { lb.Service = "shop/web lb=other" }, "is not namespace/name"},
		{"L4 a Service without a namespace", validL4, func(lb *LoadBalancer) { lb.Service = "web" }, "is not namespace/name"},
		{"L7 an Ingress with a newline", validL7, func(lb *LoadBalancer) { lb.Ingress = "shop/web\nbackend x" }, `ingress "shop/web\nbackend x" is not`},
		{"L7 a Gateway with a blank", validL7, func(lb *LoadBalancer) { lb.Gateway = "shop/gw listener=TLS" }, "gateway"},
		{"L7 client validation of an Ingress", validL7, func(lb *LoadBalancer) {
			lb.Listeners[1].ClientValidation = &ClientValidation{CACertPEM: string(testCert)}
		}, "HTTPS/443: only an HTTPS listener of a Gateway verifies client certificates"},
		{"L7 client validation of an HTTP listener", validL7, func(lb *LoadBalancer) {
			lb.Gateway = "shop/gw"
			lb.Listeners[0].ClientValidation = &ClientValidation{CACertPEM: string(testCert)}
		}, "HTTP/80: only an HTTPS listener of a Gateway verifies client certificates"},
		{"L7 client validation without a certificate", validL7, func(lb *LoadBalancer) {
			lb.Gateway = "shop/gw"
			lb.Listeners[1].ClientValidation = &ClientValidation{CACertPEM: "not PEM"}
		}, "HTTPS/443: client validation: the CA certificates hold no PEM certificate"},
		{"L4 client validation", validL4, func(lb *LoadBalancer) {
			lb.Listeners[0].ClientValidation = &ClientValidation{CACertPEM: string(testCert)}
		}, "TCP/80: only an HTTPS listener of a Gateway verifies client certificates"},
		{"L7 hostnames of an Ingress", validL7, func(lb *LoadBalancer) {
			lb.Listeners[1].Hostnames = []string{"a.example", ""}
		}, "HTTPS/443: only an HTTPS listener of a Gateway has hostnames"},
		{"L7 hostnames of an HTTP listener", validL7, func(lb *LoadBalancer) {
			lb.Gateway = "shop/gw"
			lb.Listeners[0].Hostnames = []string{"a.example", ""}
		}, "HTTP/80: only an HTTPS listener of a Gateway has hostnames"},
		{"L7 hostnames in upper case", validL7, func(lb *LoadBalancer) {
			lb.Gateway = "shop/gw"
			lb.Listeners[1].Hostnames = []string{"A.example", ""}
		}, `HTTPS/443: hostname "A.example" is not`},
		{"L7 a hostname with a blank", validL7, func(lb *LoadBalancer) {
			lb.Gateway = "shop/gw"
			lb.Listeners[1].Hostnames = []string{"a.example acl x", ""}
		}, `HTTPS/443: hostname "a.example acl x" is not`},
		{"L7 one hostname", validL7, func(lb *LoadBalancer) {
			lb.Gateway = "shop/gw"
			lb.Listeners[1].Hostnames = []string{"a.example", "a.example"}
		}, "HTTPS/443: hostnames: fewer than two"},
		{"L4 hostnames", validL4, func(lb *LoadBalancer) {
			lb.Listeners[0].Hostnames = []string{"a.example", ""}
		}, "TCP/80: only an HTTPS listener of a Gateway has hostnames"},
		{"L7 a shared pool name with a newline", validL7, func(lb *LoadBalancer) {
			lb.Pools[0].Name = "p\nbackend q"
			lb.HTTP.Rules[0].Pool, lb.HTTP.DefaultPool = lb.Pools[0].Name, lb.Pools[0].Name
		}, `pool name "p\nbackend q" holds a character`},
		{"L7 a Secret with a quote", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS[0].Secret = "shop/cert'" }, `TLS Secret "shop/cert'" is not namespace/name`},
		{"L4 unknown kind", validL4, func(lb *LoadBalancer) { lb.Kind = "L3" }, `kind "L3" is not L4 or L7`},
		{"L4 bad requested VIP", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "vip" }, `requested VIP "vip": not an IP address`},
		{"L4 requested VIP with a zone", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "fe80::1%eth0" }, "with a zone"},
		{"L4 requested VIP unspecified", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "0.0.0.0" }, "the unspecified address"},
		{"L4 requested VIP unspecified IPv6", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "::" }, "the unspecified address"},
		{"L4 requested VIP loopback", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "127.0.0.1" }, "a loopback address"},
		{"L4 requested VIP loopback mapped", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "::ffff:127.0.0.2" }, "a loopback address"},
		{"L4 requested VIP link-local", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "169.254.169.254" }, "a link-local address"},
		{"L4 requested VIP link-local IPv6", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "fe80::1" }, "a link-local address"},
		{"L4 requested VIP link-local multicast", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "224.0.0.251" }, "a link-local address"},
		{"L4 requested VIP multicast", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "239.1.2.3" }, "a multicast address"},
		{"L4 requested VIP broadcast", validL4, func(lb *LoadBalancer) { lb.RequestedVIP = "255.255.255.255" }, "the broadcast address"},
		{"L4 no listeners (an SCTP-only Service)", validL4, func(lb *LoadBalancer) { lb.Listeners = nil }, "no listeners: nothing to serve"},
		{"L4 SCTP listener", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Protocol = "SCTP" }, `protocol "SCTP" is not TCP or UDP`},
		{"L4 HTTP listener", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Protocol = HTTP }, "is not TCP or UDP"},
		{"L4 port 0", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Port = 0 }, "TCP/0: port out of 1-65535"},
		{"L4 port 65536", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Port = 65536 }, "port out of 1-65535"},
		{"L4 listener twice", validL4, func(lb *LoadBalancer) { lb.Listeners = append(lb.Listeners, lb.Listeners[0]) }, "TCP/80: given twice"},
		{"L4 pool without a name", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Pool.Name = "" }, "pool has no name"},
		{"L4 pool of two listeners", validL4, func(lb *LoadBalancer) { lb.Listeners[1].Pool.Name = lb.Listeners[0].Pool.Name }, "used by another listener"},
		{"L4 member not an IP", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Pool.Members[0].IP = "node-1" }, `member "node-1": not an IP address`},
		{"L4 member with a zone", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Pool.Members[0].IP = "fe80::1%eth0" }, "with a zone"},
		{"L4 member port 0", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Pool.Members[0].Port = 0 }, "198.18.0.11:0: port out of 1-65535"},
		{"L4 with HTTP routes", validL4, func(lb *LoadBalancer) { lb.HTTP = &HTTPRoutes{} }, "an L4 load balancer has no HTTP routes"},
		{"L4 with an Ingress", validL4, func(lb *LoadBalancer) { lb.Ingress = "shop/web" }, "an L4 load balancer has no"},
		{"L7 no listeners", validL7, func(lb *LoadBalancer) { lb.Listeners = nil }, "no listeners"},
		{"L7 no routes", validL7, func(lb *LoadBalancer) { lb.HTTP = nil }, "without HTTP routes"},
		{"L7 a TCP listener", validL7, func(lb *LoadBalancer) { lb.Listeners[0].Protocol = TCP }, "HTTP or HTTPS"},
		{"L7 a listener pool", validL7, func(lb *LoadBalancer) { lb.Listeners[0].Pool.Name = "p" }, "no pool of its own"},
		{"L7 a listener twice", validL7, func(lb *LoadBalancer) { lb.Listeners = append(lb.Listeners, lb.Listeners[0]) }, "given twice"},
		{"L7 HTTPS without certificates", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS = nil }, "HTTPS listener without TLS"},
		{"L7 certificates without HTTPS", validL7, func(lb *LoadBalancer) { lb.Listeners = lb.Listeners[:1] }, "without an HTTPS listener"},
		{"L7 a pool without a name", validL7, func(lb *LoadBalancer) { lb.Pools[0].Name = "" }, "a pool has no name"},
		{"L7 a pool twice", validL7, func(lb *LoadBalancer) { lb.Pools = append(lb.Pools, lb.Pools[0]) }, "pool p: given twice"},
		{"L7 an unknown rule pool", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Pool = "q" }, "pool q is not one"},
		{"L7 an unknown default pool", validL7, func(lb *LoadBalancer) { lb.HTTP.DefaultPool = "q" }, "default pool q"},
		{"L7 a relative path", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Path = "a" }, "does not start with /"},
		{"L7 an unknown path type", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].PathType = "Regex" }, "is not Exact, Prefix or RegularExpression"},
		{"L7 a prefix with a trailing slash", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Path = "/a/" }, "no trailing /"},
		{"L7 a bad host", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Host = "a.*.com" }, "not a host name"},
		{"L7 a host with a newline", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Host = "a\nfrontend" }, "not a host name"},
		{"L7 a host with a NUL", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Host = "*.b\x00" }, "not a host name"},
		{"L7 a rule twice", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules = append(lb.HTTP.Rules, lb.HTTP.Rules[0]) }, "another rule matches the same requests"},
		{"L7 a rule twice but its pool", validL7, func(lb *LoadBalancer) {
			lb.Pools = append(lb.Pools, Pool{Name: "q"})
			r := lb.HTTP.Rules[0].Clone()
			r.Pool, r.Order = "q", 3
			lb.HTTP.Rules = append(lb.HTTP.Rules, r)
		}, "another rule matches the same requests"},
		{"L7 the same listener port twice", validL7, func(lb *LoadBalancer) { lb.Listeners[0].Port = 443 }, "given twice"},
		{"L7 a rule without pool, redirect or status", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Pool = "" }, "exactly one of a pool, a redirect and a fixed status"},
		{"L7 a rule with a pool and a redirect", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Redirect = &Redirect{StatusCode: 302} }, "exactly one of"},
		{"L7 a rule with a pool and a status", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].FixedStatus = 500 }, "exactly one of"},
		{"L7 a rule with a pool and backends", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Backends = []RuleBackend{{Pool: "p", Weight: 1}}
		}, "exactly one of"},
		{"L7 backends, none", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].Backends = "", []RuleBackend{} }, "0 backends"},
		{"L7 backends, 17", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].Backends = "", slices.Repeat([]RuleBackend{{Weight: 1}}, 17)
		}, "17 backends"},
		{"L7 backends, weight 0", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].Backends = "", []RuleBackend{{Pool: "p"}}
		}, "backend 0: weight 0 is out of 1-1000000"},
		{"L7 backends, a missing pool", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].Backends = "", []RuleBackend{{Pool: "p", Weight: 1}, {Pool: "x", Weight: 1}}
		}, "backend 1: pool x is not one of the pools"},
		{"L7 backends, a pool twice", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].Backends = "", []RuleBackend{{Pool: "p", Weight: 1}, {Pool: "p", Weight: 1}}
		}, "backend 1: pool p is another backend's"},
		{"L7 backends, none with a pool", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].Backends = "", []RuleBackend{{Weight: 1}}
		}, "none has a pool"},
		{"L7 backends, a header filter without a pool", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool = ""
			lb.HTTP.Rules[0].Backends = []RuleBackend{{Pool: "p", Weight: 1}, {Weight: 1, RequestHeaders: &HeaderFilter{Remove: []string{"x"}}}}
		}, "backend 1: a request header filter needs a pool"},
		{"L7 backends, a bad header filter", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Pool = ""
			lb.HTTP.Rules[0].Backends = []RuleBackend{{Pool: "p", Weight: 1, RequestHeaders: &HeaderFilter{Set: []Header{{Name: "a b", Value: "v"}}}}}
		}, `backend 0 request header filter: header name "a b" is not a token`},
		{"L7 cors, max age 0", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].CORS = &CORS{} }, "cors: maxAgeSeconds 0 is not positive"},
		{"L7 cors, an origin with a path", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"https://a.example/x"}, MaxAgeSeconds: 5}
		}, `cors: allowOrigins: "https://a.example/x" is not *`},
		{"L7 cors, an origin that ends a quoted word", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"https://a.example'\n    http-request deny"}, MaxAgeSeconds: 5}
		}, "is not * nor"},
		{"L7 cors, an origin without scheme", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"a.example"}, MaxAgeSeconds: 5}
		}, "is not * nor"},
		{"L7 cors, a wildcard inside a host", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"https://a.*.example"}, MaxAgeSeconds: 5}
		}, "is not * nor"},
		{"L7 cors, port 99999", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"https://a.example:99999"}, MaxAgeSeconds: 5}
		}, "port 99999 is out of 1-65535"},
		{"L7 cors, * beside an origin", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"*", "https://a.example"}, MaxAgeSeconds: 5}
		}, "cors: allowOrigins: * stands alone"},
		{"L7 cors, an origin twice", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowOrigins: []string{"https://A.example", "https://a.example"}, MaxAgeSeconds: 5}
		}, `cors: allowOrigins: "https://a.example" given twice`},
		{"L7 cors, a method with a blank", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowMethods: []string{"GET POST"}, MaxAgeSeconds: 5}
		}, `cors: allowMethods: "GET POST" is not a method`},
		{"L7 cors, a header name with a quote and a newline", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{AllowHeaders: []string{"x-a\"\n"}, MaxAgeSeconds: 5}
		}, "cors: allowHeaders:"},
		{"L7 cors, a header twice", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{ExposeHeaders: []string{"X-A", "x-a"}, MaxAgeSeconds: 5}
		}, "cors: exposeHeaders:"},
		{"L7 cors, a header name too long", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].CORS = &CORS{ExposeHeaders: []string{strings.Repeat("x", 257)}, MaxAgeSeconds: 5}
		}, "is not a header name"},
		{"L7 cors, 65 headers", validL7, func(lb *LoadBalancer) {
			var hs []string
			for i := range 65 {
				hs = append(hs, fmt.Sprintf("x-%d", i))
			}
			lb.HTTP.Rules[0].CORS = &CORS{AllowHeaders: hs, MaxAgeSeconds: 5}
		}, "cors: allowHeaders: 65 values, more than 64"},
		{"L7 a fixed status 99", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Pool, lb.HTTP.Rules[0].FixedStatus = "", 99 }, "fixed status 99 is out of 200-599"},
		{"L7 a rewrite without pool", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.FixedStatus, r.Rewrite = "", 500, &Rewrite{Hostname: "a.example"}
		}, "needs a pool"},
		{"L7 request headers without pool", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Redirect, r.RequestHeaders = "", &Redirect{StatusCode: 301}, &HeaderFilter{Remove: []string{"x"}}
		}, "needs a pool"},
		{"L7 a rule port that is no listener", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Ports = []int32{8080} }, "port 8080 is not an HTTP or HTTPS listener"},
		{"L7 a rule port twice", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Ports = []int32{80, 443, 80} }, "port 80 given twice"},
		{"L7 a certificate port that is not HTTPS", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS[0].Ports = []int32{80} }, "TLS Secret shop/cert: port 80 is not an HTTPS listener"},
		{"L7 an HTTPS port without certificate", validL7, func(lb *LoadBalancer) {
			lb.Listeners = append(lb.Listeners, Listener{Port: 8443, Protocol: HTTPS})
			lb.HTTP.TLS[0].Ports = []int32{443}
		}, "listener HTTPS/8443: no TLS certificate serves it"},
		{"L7 a bad method", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Method = "GET /" }, `method "GET /" is not a token`},
		{"L7 a bad header name", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Headers = []ValueMatch{{Name: "a b", Value: "x"}} }, `header name "a b" is not a token`},
		{"L7 a header matched twice", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Headers = []ValueMatch{{Name: "X-A", Value: "1"}, {Name: "x-a", Value: "2"}}
		}, "matched twice"},
		{"L7 a header value with a newline", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Headers = []ValueMatch{{Name: "a", Value: "x\ny"}} }, "control character"},
		{"L7 a bad header regex", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Headers = []ValueMatch{{Name: "a", Value: "(", Regex: true}} }, "header a: not a regular expression"},
		{"L7 a bad query regex", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Query = []ValueMatch{{Name: "q", Value: "[", Regex: true}} }, "query parameter q: not a regular expression"},
		{"L7 a bad path regex", validL7, func(lb *LoadBalancer) { r := &lb.HTTP.Rules[0]; r.Path, r.PathType = "/a(", PathRegex }, "not a regular expression"},
		{"L7 an empty path regex", validL7, func(lb *LoadBalancer) { r := &lb.HTTP.Rules[0]; r.Path, r.PathType = "", PathRegex }, "an empty regular expression"},
		{"L7 a filter header twice", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].RequestHeaders = &HeaderFilter{Set: []Header{{Name: "X-A", Value: "1"}}, Remove: []string{"x-a"}}
		}, "request header filter: header x-a named twice"},
		{"L7 a bad filter header name", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].ResponseHeaders = &HeaderFilter{Add: []Header{{Name: "x:y", Value: "1"}}}
		}, `response header filter: header name "x:y" is not a token`},
		{"L7 a redirect status 304", validL7, func(lb *LoadBalancer) { r := &lb.HTTP.Rules[0]; r.Pool, r.Redirect = "", &Redirect{StatusCode: 304} }, "redirect status 304 is not 301, 302, 303, 307 or 308"},
		{"L7 a redirect scheme ftp", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Redirect = "", &Redirect{Scheme: "ftp", StatusCode: 301}
		}, `redirect scheme "ftp"`},
		{"L7 a redirect wildcard host", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Redirect = "", &Redirect{Hostname: "*.a.example", StatusCode: 301}
		}, "redirect hostname"},
		// BIG-IP evaluates a redirect location as Tcl (REFERENCE 17).
		{"L7 a redirect host with Tcl", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Redirect = "", &Redirect{Hostname: `a.example[exec /bin/sh -c "id"]`, StatusCode: 302}
		}, "redirect hostname"},
		{"L7 a host with a dollar", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Host = "a$b.example" }, "not a host name"},
		{"L7 a rewrite host with a semicolon", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Rewrite = &Rewrite{Hostname: `a;b\c"d`}
		}, "rewrite hostname"},
		{"L7 a redirect port 0x10000", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.Pool, r.Redirect = "", &Redirect{Port: 65536, StatusCode: 301}
		}, "redirect port 65536"},
		{"L7 a path modifier type", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Rewrite = &Rewrite{Path: &PathModifier{Type: "Strip", Value: "/"}}
		}, `rewrite path modifier type "Strip"`},
		{"L7 a relative full path", validL7, func(lb *LoadBalancer) {
			lb.HTTP.Rules[0].Rewrite = &Rewrite{Path: &PathModifier{Type: ReplaceFullPath, Value: "x"}}
		}, `rewrite path "x" does not start with /`},
		{"L7 a prefix replacement on an Exact rule", validL7, func(lb *LoadBalancer) {
			r := &lb.HTTP.Rules[0]
			r.PathType, r.Redirect, r.Pool = PathExact, &Redirect{StatusCode: 302, Path: &PathModifier{Type: ReplacePrefixMatch, Value: "/b"}}, ""
		}, "redirect: ReplacePrefixMatch needs a Prefix path"},
		{"L7 a rewrite wildcard host", validL7, func(lb *LoadBalancer) { lb.HTTP.Rules[0].Rewrite = &Rewrite{Hostname: "*.x"} }, "rewrite hostname"},
		{"L7 a member weight 257", validL7, func(lb *LoadBalancer) { lb.Pools[0].Members[0].Weight = 257 }, "weight 257 out of 0-256"},
		{"L7 a negative member weight", validL7, func(lb *LoadBalancer) { lb.Pools[0].Members[0].Weight = -1 }, "weight -1 out of 0-256"},
		{"L7 an invalid share in an Ingress's pool", validL7, func(lb *LoadBalancer) { lb.Pools[0].InvalidWeight = 1 },
			"pool p: invalid weight 1: only a pool of a Gateway's HTTP rules answers a share of its requests 500"},
		{"L4 an invalid share", validL4, func(lb *LoadBalancer) { lb.Listeners[0].Pool.InvalidWeight = 2 }, "invalid weight 2: only a pool of a Gateway's HTTP rules"},
		{"L7 a bad member", validL7, func(lb *LoadBalancer) { lb.Pools[0].Members[0].IP = "x" }, `pool p: member "x"`},
		{"L7 a certificate without a Secret", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS[0].Secret = "" }, "has no Secret"},
		{"L7 a certificate twice", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS = append(lb.HTTP.TLS, lb.HTTP.TLS[0]) }, "given twice"},
		{"L7 a certificate without a key", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS[0].KeyPEM = nil }, "no certificate or key"},
		{"L7 a wrong fingerprint", validL7, func(lb *LoadBalancer) { lb.HTTP.TLS[0].Fingerprint = "x" }, "fingerprint"},
		{"L7 no PEM certificate", validL7, func(lb *LoadBalancer) {
			lb.HTTP.TLS[0].CertPEM, lb.HTTP.TLS[0].Fingerprint = []byte("junk"), ""
		}, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := tt.valid()
			tt.mod(lb)
			got, err := Normalize(lb)
			var invalid *InvalidModelError
			if !errors.As(err, &invalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Normalize = %v, want an *InvalidModelError containing %q", err, tt.want)
			}
			if got != nil || invalid.LoadBalancer != lb.Name || !strings.HasPrefix(err.Error(), "invalid load balancer model") {
				t.Errorf("Normalize = %v, %q: want no model and an error naming %q", got, err, lb.Name)
			}
		})
	}
	if _, err := Normalize(nil); err == nil {
		t.Error("Normalize(nil) accepted")
	}
}

func TestNormalize_noListenersIsErrNoListeners(t *testing.T) {
	lb := validL4()
	lb.Listeners = []Listener{}
	if _, err := Normalize(lb); !errors.Is(err, ErrNoListeners) {
		t.Errorf("Normalize = %v, want ErrNoListeners", err)
	}
}

func TestNormalize_returnsTheCanonicalFormWithoutTouchingItsArgument(t *testing.T) {
	lb := &LoadBalancer{Name: "c1--shop-web", Kind: L4, RequestedVIP: "::ffff:203.0.113.7", Listeners: []Listener{
		{Port: 80, Protocol: UDP, Pool: Pool{Name: "u80"}},
		{Port: 443, Protocol: TCP, Pool: Pool{Name: "t443", Members: []Member{
			{IP: "2001:DB8::2", Port: 61000, Enabled: true},
			{IP: "198.18.0.12", Port: 61000, Enabled: false},
			{IP: "::ffff:198.18.0.11", Port: 61000, Enabled: true},
			{IP: "198.18.0.12", Port: 61000, Enabled: true},
		}}},
		{Port: 80, Protocol: TCP, Pool: Pool{Name: "t80", Members: []Member{}}},
	}}
	before := lb.Clone()
	got, err := Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	want := &LoadBalancer{Name: "c1--shop-web", RequestedVIP: "203.0.113.7", Listeners: []Listener{
		{Port: 80, Protocol: TCP, Pool: Pool{Name: "t80", Members: []Member{}}},
		{Port: 443, Protocol: TCP, Pool: Pool{Name: "t443", Members: []Member{
			{IP: "198.18.0.11", Port: 61000, Enabled: true},
			{IP: "198.18.0.12", Port: 61000, Enabled: true},
			{IP: "2001:db8::2", Port: 61000, Enabled: true},
		}}},
		{Port: 80, Protocol: UDP, Pool: Pool{Name: "u80", Members: []Member{}}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Normalize (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, lb); diff != "" {
		t.Errorf("Normalize modified its argument (-before +after):\n%s", diff)
	}

	l7 := validL7()
	l7.Listeners = []Listener{{Port: 443, Protocol: HTTPS}, {Port: 80, Protocol: HTTP, Pool: Pool{Members: []Member{}}}}
	l7.Pools = []Pool{{Name: "q"}, l7.Pools[0]}
	l7.HTTP.Rules = append(l7.HTTP.Rules, Rule{Path: "/", PathType: PathPrefix, Pool: "q"}, Rule{Host: "a.example.com", Path: "/", PathType: PathPrefix, Pool: "q"})
	l7.HTTP.TLS[0].Hosts = []string{"b.example.com", "a.example.com"}
	got, err = Normalize(l7)
	if err != nil {
		t.Fatal(err)
	}
	if got.Listeners[0].Protocol != HTTP || got.Listeners[0].Pool.Members != nil || got.Pools[0].Name != "p" || got.Pools[1].Members == nil ||
		got.HTTP.Rules[0].Host != "a.example.com" || got.HTTP.Rules[2].Host != "" ||
		!slices.Equal(got.HTTP.TLS[0].Hosts, []string{"a.example.com", "b.example.com"}) {
		t.Errorf("Normalize(L7) = %+v %+v, want sorted listeners, pools, rules and hosts", got, got.HTTP)
	}
	if l7.Listeners[0].Protocol != HTTPS || l7.HTTP.TLS[0].Hosts[0] != "b.example.com" {
		t.Error("Normalize modified its L7 argument")
	}
}

// A rule may split its requests between pools, each with its own request
// header filter, and a share answered 500; Normalize keeps the order and
// sorts each filter as a rule's.
func TestNormalize_acceptsRuleBackends(t *testing.T) {
	lb := validL7()
	lb.Pools = append(lb.Pools, Pool{Name: "q"})
	lb.HTTP.Rules[0].Pool = ""
	lb.HTTP.Rules[0].Backends = []RuleBackend{
		{Pool: "q", Weight: 3, RequestHeaders: &HeaderFilter{Set: []Header{{Name: "b", Value: "2"}, {Name: "A", Value: "1"}}}},
		{Weight: 1},
		{Pool: "p", Weight: 1000000, RequestHeaders: &HeaderFilter{}},
	}
	got, err := Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	want := []RuleBackend{
		{Pool: "q", Weight: 3, RequestHeaders: &HeaderFilter{Set: []Header{{Name: "A", Value: "1"}, {Name: "b", Value: "2"}}}},
		{Weight: 1},
		{Pool: "p", Weight: 1000000},
	}
	if diff := cmp.Diff(want, got.HTTP.Rules[0].Backends); diff != "" {
		t.Errorf("backends (-want +got):\n%s", diff)
	}
	if lb.HTTP.Rules[0].Backends[0].RequestHeaders.Set[0].Name != "b" || lb.HTTP.Rules[0].Backends[2].RequestHeaders == nil {
		t.Errorf("Normalize modified its argument: %+v", lb.HTTP.Rules[0].Backends)
	}
}

// A Gateway's HTTPS listener may verify its clients' certificates; the
// model keeps the CA certificates and the mode as given.
func TestNormalize_acceptsClientValidation(t *testing.T) {
	lb := validL7()
	lb.Gateway = "shop/gw"
	lb.Listeners[1].ClientValidation = &ClientValidation{CACertPEM: string(testCert), Optional: true}
	got, err := Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lb.Listeners[1], got.Listeners[1]); diff != "" {
		t.Errorf("listener (-given +normalized):\n%s", diff)
	}
	if err := ClientValidationUnsupported(got); err == nil || !errors.Is(err, ErrUnsupported) ||
		!strings.Contains(err.Error(), "listener HTTPS/443: clientValidation") {
		t.Errorf("ClientValidationUnsupported = %v, want the listener named", err)
	}
	if err := ClientValidationUnsupported(validL7()); err != nil {
		t.Errorf("ClientValidationUnsupported without one = %v", err)
	}
}

// A Gateway's HTTPS listener keeps the hostnames of its port's listeners,
// most specific first, each once.
func TestNormalize_sortsHostnames(t *testing.T) {
	lb := validL7()
	lb.Gateway = "shop/gw"
	lb.Listeners[1].Hostnames = []string{"", "*.example", "b.example", "*.a.example", "a.example", "b.example"}
	got, err := Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.example", "b.example", "*.a.example", "*.example", ""}
	if diff := cmp.Diff(want, got.Listeners[1].Hostnames); diff != "" {
		t.Errorf("hostnames (-want +got):\n%s", diff)
	}
}

// An allowed origin matches the request origins the CORS filter's spec
// says: "*." one or more labels, a host "*" any host, the scheme's default
// port given or not, no other port, scheme or suffix.
func TestCORSOriginPattern_matchesWhatGatewayAPIAllows(t *testing.T) {
	for origin, cases := range map[string]map[string]bool{
		"https://www.foo.com": {"https://www.foo.com": true, "https://www.foo.com:443": true, "http://www.foo.com": false,
			"https://www.foo.com:8443": false, "https://wwwxfoo.com": false, "https://a.www.foo.com": false, "https://www.foo.com.evil": false},
		"https://*.bar.com": {"https://www.bar.com": true, "https://xpto.www.bar.com": true, "https://bar.com": false,
			"https://evil.com/.bar.com": false, "https://a.bar.com:444": false},
		"http://a.example:8080": {"http://a.example:8080": true, "http://a.example": false, "http://a.example:80": false},
		"http://a.example:80":   {"http://a.example": true, "http://a.example:80": true},
		"https://*":             {"https://a.example": true, "https://a": true, "http://a.example": false, "https://a.example:1": false},
	} {
		re := regexp.MustCompile(CORSOriginPattern(origin))
		for in, want := range cases {
			if got := re.MatchString(in); got != want {
				t.Errorf("%s (%s) matches %s: %v, want %v", origin, re, in, got, want)
			}
		}
	}
}
