package lbmodel

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

// withPolicy returns the L4 model with policy p on its TCP pool, or the
// L7 model with p on its shared pool.
func withPolicy(l7 bool, p *Policy) *LoadBalancer {
	if l7 {
		lb := validL7()
		lb.Pools[0].Policy = p
		return lb
	}
	lb := validL4()
	lb.Listeners[0].Pool.Policy = p
	return lb
}

func TestNormalize_refusesInvalidPolicies(t *testing.T) {
	for _, c := range []struct {
		name string
		l7   bool
		p    Policy
		want string
	}{
		{"unknown persistence", true, Policy{Persistence: &Persistence{Type: "Magic"}}, `persistence type "Magic"`},
		{"cookie on an L4 pool", false, Policy{Persistence: &Persistence{Type: PersistCookie, Name: "s"}}, "Cookie persistence needs HTTP"},
		{"cookie without a name", true, Policy{Persistence: &Persistence{Type: PersistCookie}}, `name "" is not a token`},
		{"cookie name with a blank", true, Policy{Persistence: &Persistence{Type: PersistCookie, Name: "a b"}}, "not a token"},
		{"permanent header", true, Policy{Persistence: &Persistence{Type: PersistHeader, Name: "x", Permanent: true, TimeoutSeconds: 1}}, "only a cookie is permanent"},
		{"permanent cookie without a lifetime", true, Policy{Persistence: &Persistence{Type: PersistCookie, Name: "s", Permanent: true}}, "needs a timeout"},
		{"source IP with a name", false, Policy{Persistence: &Persistence{Type: PersistSourceIP, Name: "x"}}, "has no name"},
		{"negative timeout", false, Policy{Persistence: &Persistence{Type: PersistSourceIP, TimeoutSeconds: -1}}, "persistence timeouts out of"},
		{"timeout beyond a year", false, Policy{Persistence: &Persistence{Type: PersistSourceIP, TimeoutSeconds: 31536001}}, "persistence timeouts out of"},
		{"health path without /", true, Policy{HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "healthz"}}, `path "healthz" does not start with /`},
		{"health path with a newline", true, Policy{HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/a\nb"}}, "control character"},
		{"TCP check with a path", false, Policy{HealthCheck: &HealthCheck{Type: CheckTCP, Path: "/"}}, "a TCP health check has no path"},
		{"unknown check", false, Policy{HealthCheck: &HealthCheck{Type: "ICMP"}}, `health check type "ICMP"`},
		{"status out of range", true, Policy{HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/", ExpectedStatuses: []StatusRange{{200, 600}}}}, "not a range within 100-599"},
		{"inverted range", true, Policy{HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/", ExpectedStatuses: []StatusRange{{300, 200}}}}, "not a range"},
		{"interval 0 is the default but negative is not", false, Policy{HealthCheck: &HealthCheck{Type: CheckTCP, IntervalSeconds: -1}}, "interval and timeout out of"},
		{"timeout over the interval", false, Policy{HealthCheck: &HealthCheck{Type: CheckTCP, IntervalSeconds: 2, TimeoutSeconds: 5}}, "longer than its interval"},
		{"fall 11", false, Policy{HealthCheck: &HealthCheck{Type: CheckTCP, Fall: 11}}, "rise and fall out of"},
		{"wildcard check host", true, Policy{HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/", Host: "*.example"}}, "not a host name"},
		{"unknown algorithm", false, Policy{Algorithm: &Algorithm{Type: "Random"}}, `algorithm "Random"`},
		{"hash key on round robin", false, Policy{Algorithm: &Algorithm{Type: RoundRobin, HashOn: HashSourceIP}}, "only a consistent hash"},
		{"hash without a key", false, Policy{Algorithm: &Algorithm{Type: ConsistentHash}}, `consistent hash on ""`},
		{"hash on a header of an L4 pool", false, Policy{Algorithm: &Algorithm{Type: ConsistentHash, HashOn: HashHeader, HashName: "x"}}, "needs HTTP"},
		{"hash on a nameless cookie", true, Policy{Algorithm: &Algorithm{Type: ConsistentHash, HashOn: HashCookie}}, "not a token"},
		{"slow start over an hour", false, Policy{SlowStartSeconds: 3601}, "slow start out of"},
		{"negative drain", false, Policy{DrainSeconds: ptr(int32(-1))}, "drain out of"},
		{"negative connection cap", false, Policy{MaxConnectionsPerMember: -1}, "connections per member"},
		{"timeouts on an L4 pool", false, Policy{Timeouts: &Timeouts{RequestMillis: 1}}, "need HTTP"},
		{"backend timeout over the request's", true, Policy{Timeouts: &Timeouts{RequestMillis: 100, BackendRequestMillis: 200}}, "longer than the request timeout"},
		{"no retry attempts", true, Policy{Retry: &Retry{}}, "retry attempts out of"},
		{"retry code 200", true, Policy{Retry: &Retry{Attempts: 1, Codes: []int32{200}}}, "retry code 200"},
		{"backend TLS without CAs", true, Policy{BackendTLS: &BackendTLS{Hostname: "a.example"}}, "exactly one of"},
		{"backend TLS with both", true, Policy{BackendTLS: &BackendTLS{Hostname: "a.example", SystemCAs: true, CACertPEM: string(testCert)}}, "exactly one of"},
		{"backend TLS with a CA that is no certificate", true, Policy{BackendTLS: &BackendTLS{Hostname: "a.example", CACertPEM: "x"}}, "hold no PEM certificate"},
		{"backend TLS without a hostname", true, Policy{BackendTLS: &BackendTLS{SystemCAs: true}}, "is not a host name"},
		{"backend TLS SAN URI without a scheme", true, Policy{BackendTLS: &BackendTLS{Hostname: "a", SystemCAs: true, SubjectAltNames: []SubjectAltName{{SANURI, "x"}}}}, "is not a URI"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			_, err := Normalize(withPolicy(c.l7, &p))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Normalize = %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func TestNormalize_policyInCanonicalForm(t *testing.T) {
	p := &Policy{
		Persistence: &Persistence{Type: PersistCookie, Name: "session", TimeoutSeconds: 3600, Permanent: true},
		HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/healthz", Host: "web.example",
			ExpectedStatuses: []StatusRange{{300, 304}, {200, 299}, {204, 204}}, IntervalSeconds: 2, TimeoutSeconds: 1, Rise: 2, Fall: 3},
		Algorithm:        &Algorithm{Type: RoundRobin},
		SlowStartSeconds: 10,
		Timeouts:         &Timeouts{},
		Retry:            &Retry{Attempts: 2, Codes: []int32{503, 502, 503}},
		BackendTLS: &BackendTLS{Hostname: "web.example", SystemCAs: true,
			SubjectAltNames: []SubjectAltName{{SANURI, "spiffe://a/b"}, {SANHostname, "web.example"}, {SANHostname, "web.example"}}},
	}
	got, err := Normalize(withPolicy(true, p))
	if err != nil {
		t.Fatal(err)
	}
	want := &Policy{
		Persistence: p.Persistence,
		Algorithm:   &Algorithm{Type: RoundRobin},
		HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/healthz", Host: "web.example",
			ExpectedStatuses: []StatusRange{{200, 304}}, IntervalSeconds: 2, TimeoutSeconds: 1, Rise: 2, Fall: 3},
		SlowStartSeconds: 10,
		Retry:            &Retry{Attempts: 2, Codes: []int32{502, 503}},
		BackendTLS: &BackendTLS{Hostname: "web.example", SystemCAs: true,
			SubjectAltNames: []SubjectAltName{{SANHostname, "web.example"}, {SANURI, "spiffe://a/b"}}},
	}
	if diff := cmp.Diff(want, got.Pools[0].Policy); diff != "" {
		t.Errorf("normalized policy (-want +got):\n%s", diff)
	}
	if p.Retry.Codes[0] != 503 || p.Algorithm == nil {
		t.Error("Normalize modified the caller's policy")
	}
	// A policy that changes nothing is no policy: two models that differ
	// only by it are the same model. An explicit round robin is kept: it
	// is not every provider's default.
	empty, err := Normalize(withPolicy(false, &Policy{Timeouts: nil, Algorithm: nil}))
	if err != nil || empty.Listeners[0].Pool.Policy != nil {
		t.Errorf("an empty policy normalized to %+v, %v; want nil", empty.Listeners[0].Pool.Policy, err)
	}
	rr, err := Normalize(withPolicy(false, &Policy{Algorithm: &Algorithm{Type: RoundRobin}}))
	if err != nil || rr.Listeners[0].Pool.Policy == nil || rr.Listeners[0].Pool.Policy.Algorithm.Type != RoundRobin {
		t.Errorf("an explicit round robin normalized to %+v, %v; want it kept", rr.Listeners[0].Pool.Policy, err)
	}
	src, err := Normalize(withPolicy(false, &Policy{Persistence: &Persistence{Type: PersistSourceIP, TimeoutSeconds: 10800}}))
	if err != nil || src.Listeners[0].Pool.Policy.Persistence.TimeoutSeconds != 10800 {
		t.Errorf("source IP persistence on an L4 pool: %v", err)
	}
}

func TestNormalize_aTLSRouteCannotUseAnHTTPPolicyPool(t *testing.T) {
	lb := gatewayStreams()
	for i := range lb.Pools {
		lb.Pools[i].Policy = &Policy{Timeouts: &Timeouts{RequestMillis: 1000}}
	}
	if _, err := Normalize(lb); err == nil || !strings.Contains(err.Error(), "policy for HTTP only") {
		t.Fatalf("Normalize = %v, want the SNI route's HTTP-only policy refused", err)
	}
}
