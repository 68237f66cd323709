package lbmodel

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStripPolicies_leavesOutAndNamesWhatTheProviderCannotExpress(t *testing.T) {
	full := &Policy{
		Persistence:             &Persistence{Type: PersistCookie, Name: "s", IdleTimeoutSeconds: 60},
		HealthCheck:             &HealthCheck{Type: CheckHTTP, Path: "/h", Host: "web.example"},
		Algorithm:               &Algorithm{Type: ConsistentHash, HashOn: HashHeader, HashName: "x-user"},
		SlowStartSeconds:        5,
		MaxConnectionsPerMember: 10,
		Timeouts:                &Timeouts{RequestMillis: 1000},
		Retry:                   &Retry{Attempts: 2},
		BackendTLS:              &BackendTLS{Hostname: "web.example", SystemCAs: true, SubjectAltNames: []SubjectAltName{{SANURI, "spiffe://x"}}},
	}
	lb, err := Normalize(withPolicy(true, full))
	if err != nil {
		t.Fatal(err)
	}
	caps := PolicyCapabilities{Provider: "test", HTTP: PolicySupport{
		Persistence: []PersistenceType{PersistCookie}, HealthChecks: []HealthCheckType{CheckHTTP},
		Algorithms: []AlgorithmType{ConsistentHash}, HashKeys: []HashKey{HashSourceIP}, Timeouts: true, BackendTLS: true,
	}}
	got, gaps := caps.StripPolicies(lb)
	want := &Policy{
		Persistence: &Persistence{Type: PersistCookie, Name: "s"},
		HealthCheck: &HealthCheck{Type: CheckHTTP, Path: "/h"},
		Timeouts:    &Timeouts{RequestMillis: 1000},
	}
	if diff := cmp.Diff(want, got.Pools[0].Policy); diff != "" {
		t.Errorf("stripped policy (-want +got):\n%s", diff)
	}
	var fields []string
	for _, g := range gaps {
		if g.Pool != "p" || g.Provider != "test" {
			t.Errorf("gap %+v", g)
		}
		fields = append(fields, g.Field)
	}
	wantFields := []string{"persistence.idleTimeoutSeconds", "healthCheck.host", "algorithm.hashOn=Header",
		"slowStartSeconds", "maxConnectionsPerMember", "retry", "backendTLS.subjectAltNames type=URI"}
	if diff := cmp.Diff(wantFields, fields); diff != "" {
		t.Errorf("gaps (-want +got):\n%s", diff)
	}
	if lb.Pools[0].Policy.SlowStartSeconds != 5 {
		t.Error("StripPolicies modified its argument")
	}
	if s := gaps[0].String(); s != "pool p: policy persistence.idleTimeoutSeconds is not supported by the test provider" {
		t.Errorf("gap wording %q", s)
	}

	// Retries on the codes the provider has, without the backoff it lacks;
	// backend TLS with several names it cannot verify is left out whole.
	lb, err = Normalize(withPolicy(true, &Policy{
		Retry:      &Retry{Attempts: 2, Codes: []int32{418, 503, 500}, BackoffMillis: 100},
		BackendTLS: &BackendTLS{Hostname: "web.example", SystemCAs: true, SubjectAltNames: []SubjectAltName{{SANHostname, "a.example"}, {SANHostname, "b.example"}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	caps = PolicyCapabilities{HTTP: PolicySupport{Retry: true, RetryCodes: []int32{500, 503}, BackendTLS: true}}
	got, gaps = caps.StripPolicies(lb)
	if diff := cmp.Diff(&Policy{Retry: &Retry{Attempts: 2, Codes: []int32{500, 503}}}, got.Pools[0].Policy); diff != "" {
		t.Errorf("retry codes and backoff (-want +got):\n%s", diff)
	}
	fields = nil
	for _, g := range gaps {
		fields = append(fields, g.Field)
	}
	if diff := cmp.Diff([]string{"retry.codes=418", "retry.backoffMillis", "backendTLS.subjectAltNames (more than one)"}, fields); diff != "" {
		t.Errorf("gaps (-want +got):\n%s", diff)
	}

	// Backend TLS whose one name is not the hostname, which a provider
	// that verifies the hostname alone cannot check, is left out whole;
	// a name equal to the hostname (in any case) stays.
	for san, want := range map[string]bool{"b.example": false, "Web.Example": true} {
		tls := &BackendTLS{Hostname: "web.example", SystemCAs: true, SubjectAltNames: []SubjectAltName{{SANHostname, san}}}
		lb, err = Normalize(withPolicy(true, &Policy{BackendTLS: tls}))
		if err != nil {
			t.Fatal(err)
		}
		got, gaps = PolicyCapabilities{HTTP: PolicySupport{BackendTLS: true}}.StripPolicies(lb)
		if kept := got.Pools[0].Policy != nil; kept != want || len(gaps) != map[bool]int{true: 0, false: 1}[want] ||
			(!want && gaps[0].Field != "backendTLS.subjectAltNames (other than the hostname)") {
			t.Errorf("subject alternative name %s: policy %+v, gaps %v; want it kept %v", san, got.Pools[0].Policy, gaps, want)
		}
	}

	// Nothing supported: an L4 pool keeps its members and loses its policy.
	l4, _ := Normalize(withPolicy(false, &Policy{Persistence: &Persistence{Type: PersistSourceIP, TimeoutSeconds: 10800}}))
	got, gaps = PolicyCapabilities{}.StripPolicies(l4)
	if got.Listeners[0].Pool.Policy != nil || len(gaps) != 1 || gaps[0].Field != "persistence.type=SourceIP" ||
		len(got.Listeners[0].Pool.Members) != 1 {
		t.Errorf("no support: policy %+v, gaps %v", got.Listeners[0].Pool.Policy, gaps)
	}
}
