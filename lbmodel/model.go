// Package lbmodel is the load balancer model: what npl-lbsync builds from
// Kubernetes objects, every provider makes a load balancer match, and
// npl-edge serves. It holds the model's types, its one check (Normalize),
// the names of load balancer objects and the checks of what a provider can
// express. It sits at the bottom: it imports no other package of npl, so
// npl-lbsync, the providers and npl-edge all share it and none imports
// another through it.
package lbmodel

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// Protocol of a listener, as Kubernetes spells it.
type Protocol string

const (
	// TCP is a TCP listener.
	TCP Protocol = "TCP"
	// UDP is a UDP listener.
	UDP Protocol = "UDP"
	// HTTP is a plain HTTP listener of an L7 load balancer.
	HTTP Protocol = "HTTP"
	// HTTPS is an HTTP listener of an L7 load balancer that terminates TLS
	// with the certificates of its HTTPRoutes.
	HTTPS Protocol = "HTTPS"
	// TLS is a listener of a Gateway's load balancer that routes TLS
	// connections by their SNI server name (Gateway API TLSRoute) to the
	// pools its Listener.SNI routes name. It passes TLS through to the
	// pool, or terminates it with the certificates of HTTPRoutes.TLS
	// whose Ports hold its port when Listener.Terminate is set.
	TLS Protocol = "TLS"
)

// AppProtocolH2C is Pool.AppProtocol of a pool whose members speak HTTP/2
// without TLS (prior knowledge): gRPC backends, and Service ports whose
// appProtocol is kubernetes.io/h2c.
const AppProtocolH2C = "h2c"

// Kind says at which layer a load balancer works.
type Kind string

const (
	// L4 forwards connections: each listener has its own pool. The zero
	// Kind means L4 too, so L4 models are built and stored without a kind.
	L4 Kind = "L4"
	// L7 routes HTTP requests: its listeners (HTTP, HTTPS) have no pool of
	// their own; the rules of its HTTPRoutes pick one of its Pools.
	L7 Kind = "L7"
)

// LoadBalancer is one load balancer: desired when built by npl-lbsync,
// actual when returned by Provider.List.
type LoadBalancer struct {
	// Name is the virtual service name, from LoadBalancerName.
	Name string `json:"name"`
	// Service is the owning Service as "namespace/name".
	Service string `json:"service"`
	// RequestedVIP is the address the Service asks for (spec.loadBalancerIP or
	// the npl.io/load-balancer-ip annotation); empty lets the provider choose.
	RequestedVIP string `json:"requestedVIP,omitempty"`
	// VIPs are the addresses the load balancer serves on. Set by List only.
	VIPs []string `json:"vips,omitempty"`
	// Listeners are sorted by protocol then port.
	Listeners []Listener `json:"listeners"`

	// Kind is L4 when empty. The fields below are for L7 only.
	Kind Kind `json:"kind,omitempty"`
	// Ingress is the owning Ingress as "namespace/name" of an L7 load
	// balancer of its own; empty for one that Ingresses share.
	Ingress string `json:"ingress,omitempty"`
	// Pools are the pools of an L7 load balancer, sorted by name (SortPools);
	// every listener shares them.
	Pools []Pool `json:"pools,omitempty"`
	// HTTP routes the requests of an L7 load balancer to its Pools.
	HTTP *HTTPRoutes `json:"http,omitempty"`
	// Gateway is the owning Gateway API Gateway as "namespace/name" of an
	// L7 load balancer built from a Gateway and its routes; empty otherwise.
	Gateway string `json:"gateway,omitempty"`
}

// IsL7 reports whether lb routes HTTP requests.
func (lb *LoadBalancer) IsL7() bool { return lb != nil && lb.Kind == L7 }

// Listener is one frontend port and the pool it forwards to. The HTTP,
// HTTPS and TLS listeners of an L7 load balancer have no pool (the zero
// Pool). A Gateway's load balancer (LoadBalancer.Gateway set) may also have
// TCP and UDP listeners, each with its own Pool as an L4 load balancer's
// listeners have (Gateway API TCPRoute and UDPRoute; member weights apply).
type Listener struct {
	Port     int32    `json:"port"`
	Protocol Protocol `json:"protocol"`
	Pool     Pool     `json:"pool,omitzero"`
	// SNI are the routes of a TLS listener, sorted as SortSNI does; a
	// connection takes the first whose Host matches its server name.
	SNI []SNIRoute `json:"sni,omitempty"`
	// Terminate makes a TLS listener terminate TLS with the certificates
	// of its port and forward the plain TCP stream; otherwise it passes
	// TLS through.
	Terminate bool `json:"terminate,omitempty"`
	// ClientValidation makes an HTTPS listener of a Gateway's load
	// balancer ask its clients for a certificate and verify it (Gateway
	// API's spec.tls.frontend); nil asks for none.
	ClientValidation *ClientValidation `json:"clientValidation,omitempty"`
	// Hostnames are, on an HTTPS listener of a Gateway's load balancer,
	// the hostnames of the Gateway listeners its port serves ("" for one
	// without hostname), sorted by SortHostnames; set only when there are
	// two or more. A request whose Host another of them takes than the one
	// its TLS server name selected is misdirected (HTTP 421), as Gateway
	// API asks of connections a client reuses for another host.
	Hostnames []string `json:"hostnames,omitempty"`
}

// ClientValidation is how an HTTPS listener verifies the certificates of
// its clients (mutual TLS).
type ClientValidation struct {
	// CACertPEM holds the CA certificates (PEM) a client's certificate is
	// verified with: public data, carried in the model as a pool's
	// BackendTLS carries its own.
	CACertPEM string `json:"caCertPEM"`
	// Optional serves a client that sends no certificate or one that
	// fails verification too (Gateway API's AllowInsecureFallback);
	// otherwise the handshake fails without a valid certificate.
	Optional bool `json:"optional,omitempty"`
}

// SNIRoute sends the TLS connections for a server name to a pool.
type SNIRoute struct {
	// Host is a host name or a wildcard such as *.example.com (one or more
	// labels, as Gateway API's hostnames), or empty for every name.
	Host string `json:"host,omitempty"`
	// Pool names one of the load balancer's Pools.
	Pool string `json:"pool"`
}

// HTTPRoutes is the L7 part of a load balancer: which pool serves a request,
// and the certificates of its HTTPS listeners (and of its terminating TLS
// listeners).
type HTTPRoutes struct {
	// Rules are sorted by SortRules, so that a load balancer that takes the
	// first matching rule gives each request the rule Kubernetes would.
	Rules []Rule `json:"rules"`
	// DefaultPool serves the requests no rule matches; empty when none.
	DefaultPool string `json:"defaultPool,omitempty"`
	// TLS are the certificates of the HTTPS and terminating TLS listeners,
	// sorted by Secret.
	TLS []TLSCert `json:"tls,omitempty"`
}

// PathType says how a rule's path matches a request path.
type PathType string

const (
	// PathExact matches the path exactly, case-sensitively.
	PathExact PathType = "Exact"
	// PathPrefix matches the path and every path under it, element by
	// element: /foo matches /foo and /foo/bar, not /foobar.
	PathPrefix PathType = "Prefix"
	// PathRegex matches the path against a regular expression in the
	// common RE2/PCRE subset, anchored at both ends (Gateway API's
	// RegularExpression).
	PathRegex PathType = "RegularExpression"
)

// Rule sends the requests for a host and a path to a pool.
type Rule struct {
	// Host is a host name, a wildcard such as *.example.com, or empty for
	// every host. The wildcard stands for one DNS label in the load
	// balancer of an Ingress, for one or more labels in a Gateway's
	// (LoadBalancer.Gateway set), as Gateway API's hostnames do.
	Host string `json:"host,omitempty"`
	// Path starts with "/"; a Prefix path has no trailing "/" unless it is
	// "/" itself.
	Path     string   `json:"path"`
	PathType PathType `json:"pathType"`
	// Pool names one of the load balancer's Pools. It is empty when the
	// rule answers by itself: with a Redirect, or with FixedStatus.
	Pool string `json:"pool"`

	// The fields below come from Gateway API routes; Ingress rules leave
	// them zero.

	// Ports are the listener ports the rule serves on, sorted; empty serves
	// it on every listener of the load balancer (Ingress).
	Ports []int32 `json:"ports,omitempty"`
	// Method, when set, is the request method the rule matches (GET, ...).
	Method string `json:"method,omitempty"`
	// Headers and Query are further tests of the request that must all
	// pass: header names compare case-insensitively, query parameter names
	// exactly.
	Headers []ValueMatch `json:"headers,omitempty"`
	Query   []ValueMatch `json:"query,omitempty"`
	// Order breaks the ties of rules that SortRules ranks equal, lowest
	// first: Gateway API orders them by route age, then route name, then
	// rule index, which only the builder knows.
	Order int32 `json:"order,omitempty"`
	// RequestHeaders and ResponseHeaders change headers of the request sent
	// to the pool and of the response sent back.
	RequestHeaders  *HeaderFilter `json:"requestHeaders,omitempty"`
	ResponseHeaders *HeaderFilter `json:"responseHeaders,omitempty"`
	// Redirect answers the request with a redirect; the rule has no Pool.
	Redirect *Redirect `json:"redirect,omitempty"`
	// Rewrite changes the host or path of the request sent to the pool.
	Rewrite *Rewrite `json:"rewrite,omitempty"`
	// FixedStatus, for a rule without Pool nor Redirect, is the HTTP status
	// answered: 500 for a rule whose backends are all invalid, as Gateway
	// API requires (the pool of a rule with some invalid backends answers
	// their share 500: Pool.InvalidWeight).
	FixedStatus int32 `json:"fixedStatus,omitempty"`
	// Backends, for a rule without Pool, Redirect or FixedStatus, splits
	// its requests between pools, each request to one backend chosen at
	// random in proportion to the weights, which then applies its own
	// request header filter after the rule's: Gateway API's filters on
	// one backendRef among several, which no pool of the backends' members
	// joined can apply (a load balancer changes a request before it
	// chooses a member).
	Backends []RuleBackend `json:"backends,omitempty"`
	// CORS, when set, answers the rule's cross-origin requests (preflight
	// requests by itself) as Gateway API's CORS filter asks.
	CORS *CORS `json:"cors,omitempty"`
}

// MaxRuleBackends is the most backends a rule splits its requests between:
// the most backendRefs a Gateway API route rule has.
const MaxRuleBackends = 16

// RuleBackend is one of the backends a rule splits its requests between
// (Rule.Backends).
type RuleBackend struct {
	// Pool names one of the load balancer's Pools; empty answers this
	// share of the requests 500 (invalid backendRefs, as Gateway API
	// requires).
	Pool string `json:"pool,omitempty"`
	// Weight is the backend's share: Weight of the sum of the rule's
	// backends' weights, 1-1000000 (Gateway API's largest weight).
	Weight int32 `json:"weight"`
	// RequestHeaders changes the headers of the requests sent to Pool,
	// after the rule's RequestHeaders.
	RequestHeaders *HeaderFilter `json:"requestHeaders,omitempty"`
}

// SameModel reports whether two normalized load balancers are the same,
// field by field as their JSON says (certificates by fingerprint: the PEM
// data is never encoded), VIPs included: a provider that chooses VIPs
// itself compares copies without them.
func SameModel(a, b *LoadBalancer) bool {
	x, errX := json.Marshal(a)
	y, errY := json.Marshal(b)
	return errX == nil && errY == nil && string(x) == string(y)
}

// Equal reports whether two normalized rules are the same.
func (r Rule) Equal(o Rule) bool { return reflect.DeepEqual(r, o) }

// ValueMatch tests a named value of a request (a header, a query parameter).
type ValueMatch struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Regex matches Value as a regular expression (the RE2/PCRE subset)
	// rather than exactly; like a RegularExpression path, it must match the
	// whole value (anchored at both ends).
	Regex bool `json:"regex,omitempty"`
}

// Header is a header name and value.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HeaderFilter changes headers: Set replaces (or adds) a header, Add
// appends a value, Remove deletes a header by name.
type HeaderFilter struct {
	Set    []Header `json:"set,omitempty"`
	Add    []Header `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// PathModifier replaces the path of a request: all of it
// (ReplaceFullPath), or the part a Prefix rule matched (ReplacePrefixMatch).
type PathModifier struct {
	// Type is "ReplaceFullPath" or "ReplacePrefixMatch".
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Redirect answers a request with a redirect to the same URL with some of
// its parts replaced; an empty field keeps the request's.
type Redirect struct {
	Scheme   string        `json:"scheme,omitempty"`
	Hostname string        `json:"hostname,omitempty"`
	Port     int32         `json:"port,omitempty"`
	Path     *PathModifier `json:"path,omitempty"`
	// StatusCode is 301 or 302 (Gateway API's core), or 303, 307 or 308.
	StatusCode int32 `json:"statusCode"`
}

// Rewrite changes the request sent to the pool; an empty field keeps the
// request's.
type Rewrite struct {
	Hostname string        `json:"hostname,omitempty"`
	Path     *PathModifier `json:"path,omitempty"`
}

// TLSCert is a certificate and key the HTTPS listener serves, from a
// Kubernetes TLS Secret. The PEM data is never persisted nor printed; the
// Fingerprint stands for it in stored models and in what providers list.
type TLSCert struct {
	// Secret is the Secret the certificate comes from, as "namespace/name".
	Secret string `json:"secret"`
	// Hosts are the host names it serves, sorted.
	Hosts []string `json:"hosts,omitempty"`
	// Fingerprint is CertFingerprint(CertPEM).
	Fingerprint string `json:"fingerprint"`
	// Ports are the HTTPS listener ports that serve it, sorted; empty
	// serves it on every HTTPS listener (Ingress).
	Ports []int32 `json:"ports,omitempty"`
	// CertPEM is the certificate chain and KeyPEM the private key, PEM
	// encoded. They are set in desired models only.
	CertPEM []byte `json:"-"`
	KeyPEM  []byte `json:"-"`
}

// String describes the certificate without its key material, so that
// printing a model never prints a private key.
func (c TLSCert) String() string {
	return fmt.Sprintf("{Secret:%s Hosts:%v Fingerprint:%s}", c.Secret, c.Hosts, c.Fingerprint)
}

// GoString is String: %#v must not print the key either.
func (c TLSCert) GoString() string { return "lbmodel.TLSCert" + c.String() }

// WithoutKeys returns a copy of c without the PEM data: what a provider can
// report of a certificate it holds.
func (c TLSCert) WithoutKeys() TLSCert {
	c.CertPEM, c.KeyPEM = nil, nil
	c.Hosts = slices.Clone(c.Hosts)
	return c
}

// Pool is a named set of backend members.
type Pool struct {
	// Name is the pool name, from PoolName.
	Name string `json:"name"`
	// AppProtocol is the protocol an L7 load balancer speaks to the
	// members: empty for HTTP/1.1 (upgraded to WebSocket when the client
	// asks), AppProtocolH2C for HTTP/2 without TLS.
	AppProtocol string `json:"appProtocol,omitempty"`
	// Members are sorted by IP then port (SortMembers).
	Members []Member `json:"members"`
	// InvalidWeight is the share of the pool's requests that Gateway API
	// sends to invalid backends (backendRefs that name no Service port it
	// may use), in the unit of the members' Weight: the load balancer
	// answers them 500, as one more member of this weight that answers
	// 500 to every request would. Zero for none, else 1-256, on the pools
	// of a Gateway's L7 load balancer that HTTP rules use only: a TCP,
	// UDP or TLS connection cannot be answered a status. A pool with it
	// and no members answers 500 to every request.
	InvalidWeight int32 `json:"invalidWeight,omitempty"`
	// Policy is how the load balancer treats the members; nil: its
	// defaults.
	Policy *Policy `json:"policy,omitempty"`
}

// Member is one backend: nodeIP:nodePort in NodePortLocal mode.
type Member struct {
	IP   string `json:"ip"`
	Port int32  `json:"port"`
	// Enabled is false for a member that drains (its Pod is terminating).
	Enabled bool `json:"enabled"`
	// Weight is the member's share of the pool's requests relative to the
	// other members, 1-256; zero means 1. Gateway API's weighted
	// backendRefs set it.
	Weight int32 `json:"weight,omitempty"`
}

// WeightGCD returns the greatest common divisor of weights (0 when all are
// 0): dividing every weight of a set by it keeps their proportions in the
// smallest numbers, as the providers and the builder that scale weights do.
func WeightGCD(weights ...int32) int32 {
	g := int32(0)
	for _, w := range weights {
		for w != 0 {
			g, w = w, g%w
		}
	}
	return g
}

// SortMembers sorts members by IP (numerically) then port, and drops
// duplicates; an enabled duplicate wins over a disabled one.
func SortMembers(members []Member) []Member {
	slices.SortFunc(members, compareMembers)
	out := members[:0]
	for _, m := range members {
		if n := len(out); n > 0 && out[n-1].IP == m.IP && out[n-1].Port == m.Port {
			out[n-1].Enabled = out[n-1].Enabled || m.Enabled
			continue
		}
		out = append(out, m)
	}
	return out
}

// CompareMembers orders members by IP (numerically) then port, as
// SortMembers sorts them.
func CompareMembers(a, b Member) int { return compareMembers(a, b) }

func compareMembers(a, b Member) int {
	if c := compareIP(a.IP, b.IP); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

func compareIP(a, b string) int {
	x, errA := netip.ParseAddr(a)
	y, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return cmp.Compare(a, b)
	}
	return x.Compare(y)
}

// SortPools sorts pools by name.
func SortPools(pools []Pool) {
	slices.SortFunc(pools, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
}

// SortRules sorts rules by precedence, most specific first: hosts named
// exactly (by name), then wildcard hosts (longest first), then rules for
// every host; within a host, Exact paths, then RegularExpression paths
// longest first (a regular expression is more specific than a prefix that
// covers it, "/" say), then Prefix paths longest first. Rules equal so far follow
// Gateway API's precedence: a rule with a Method before one without, then
// more header matches first, then more query matches first, then the lower
// Order. Ingress rules, which leave those zero, keep the order of host and
// path alone. The last ties are broken by path, pool, then MatchKey, so
// that the order of the rules of a valid model is total. A load balancer
// that takes the first rule that matches then picks the rule Kubernetes
// prescribes.
func SortRules(rules []Rule) {
	slices.SortFunc(rules, CompareRules)
}

// CompareRules is the order of SortRules.
func CompareRules(a, b Rule) int {
	if c := cmp.Compare(hostClass(a.Host), hostClass(b.Host)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.Host), len(a.Host)); c != 0 && strings.HasPrefix(a.Host, "*") {
		return c
	}
	if c := cmp.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	if c := cmp.Compare(pathClass(a.PathType), pathClass(b.PathType)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.Path), len(a.Path)); c != 0 {
		return c
	}
	if c := cmp.Compare(boolInt(a.Method == ""), boolInt(b.Method == "")); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.Headers), len(a.Headers)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.Query), len(a.Query)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Order, b.Order); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.MatchKey(), b.MatchKey()))
}

// MatchKey is everything of a rule that decides which requests it matches
// (host, path, ports, method, headers, query) as one string: two rules of
// a load balancer never have the same key.
func (r Rule) MatchKey() string {
	b, _ := json.Marshal(Rule{Host: r.Host, Path: r.Path, PathType: r.PathType, Ports: r.Ports, Method: r.Method,
		Headers: r.Headers, Query: r.Query})
	return string(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hostClass(h string) int {
	switch {
	case h == "":
		return 2
	case strings.HasPrefix(h, "*."):
		return 1
	}
	return 0
}

func pathClass(t PathType) int {
	switch t {
	case PathExact:
		return 0
	case PathRegex:
		return 1
	}
	return 2
}

// PathMatch is one test of a request path as load balancers express it,
// character by character.
type PathMatch struct {
	Path string
	// Prefix tests that the request path begins with Path; otherwise that
	// it equals Path.
	Prefix bool
}

// PathMatches returns the tests whose union is the rule's Exact or Prefix
// path (a RegularExpression path has none of this kind): an Exact
// path is one equality; Prefix "/" is every path; another Prefix path p is
// p itself or any path that begins with p + "/".
func (r Rule) PathMatches() []PathMatch {
	switch {
	case r.PathType == PathExact:
		return []PathMatch{{Path: r.Path}}
	case r.Path == "/":
		return []PathMatch{{Path: "/", Prefix: true}}
	}
	return []PathMatch{{Path: r.Path}, {Path: r.Path + "/", Prefix: true}}
}

// PathOf is the inverse of Rule.PathMatches: the path and path type whose
// tests are ms, in that order. ok is false when no rule has these tests.
func PathOf(ms []PathMatch) (path string, typ PathType, ok bool) {
	switch {
	case len(ms) == 1 && !ms[0].Prefix:
		return ms[0].Path, PathExact, true
	case len(ms) == 1 && ms[0].Path == "/":
		return "/", PathPrefix, true
	case len(ms) == 2 && !ms[0].Prefix && ms[1].Prefix && ms[1].Path == ms[0].Path+"/" && ms[0].Path != "/":
		return ms[0].Path, PathPrefix, true
	}
	return "", "", false
}

// CertFingerprint identifies a certificate chain: the SHA-256, in hex, of
// the DER bytes of its CERTIFICATE blocks, so that re-encoding the PEM does
// not change it. The key needs no fingerprint of its own: it must match the
// certificate. It is empty when certPEM holds no certificate.
func CertFingerprint(certPEM []byte) string {
	h := sha256.New()
	found := false
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			h.Write(block.Bytes)
			found = true
		}
	}
	if !found {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// validHost accepts an empty host, a host name, or a wildcard *.name: the
// letters, digits, "-" and "." of DNS names (Kubernetes and Gateway API
// hostnames hold nothing else), so that no host can end a line or a word
// of a load balancer's configuration, nor hold what a provider's language
// evaluates (BIG-IP builds a redirect's location as a Tcl expression:
// "[", "$", ";", backslashes and quotes would run there).
func validHost(h string) bool {
	if strings.HasPrefix(h, "*") {
		h = strings.TrimPrefix(h, "*.")
		if h == "" {
			return false
		}
	}
	return !strings.ContainsFunc(h, func(c rune) bool { return !dnsChar(c) })
}

// dnsChar reports whether c may be in a DNS name: a letter, a digit, "-"
// or ".".
func dnsChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}

// SortListeners sorts listeners by protocol then port.
func SortListeners(ls []Listener) {
	slices.SortFunc(ls, func(a, b Listener) int {
		if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
}
