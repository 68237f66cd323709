package lbmodel

import (
	"fmt"
	"slices"
	"strings"
)

// PolicySupport is what of a pool's policy a provider can express on one
// kind of pool. A field it cannot express is left out of what the
// provider gets and reported (PolicyGap), never dropped silently: the rest
// of the policy is applied.
type PolicySupport struct {
	Persistence []PersistenceType
	// PersistenceIdleTimeout: a cookie or header session's idle timeout.
	PersistenceIdleTimeout bool
	HealthChecks           []HealthCheckType
	// HealthCheckHost: the Host header of an HTTP check.
	HealthCheckHost bool
	Algorithms      []AlgorithmType
	HashKeys        []HashKey
	SlowStart       bool
	MaxConnections  bool
	Timeouts        bool
	Retry           bool
	// RetryCodes are the answers the provider can retry on; nil: any of
	// 400-599. A code it cannot retry on is left out of Retry.Codes.
	RetryCodes []int32
	// RetryBackoff: a wait before each retry.
	RetryBackoff bool
	BackendTLS   bool
	// BackendTLSURI: subject alternative names of type URI.
	BackendTLSURI bool
	// BackendTLSManySANs: more than one subject alternative name, one of
	// which the certificate must carry.
	BackendTLSManySANs bool
	// BackendTLSOtherSAN: a subject alternative name other than the
	// hostname, which the certificate must carry instead of the hostname
	// (still the SNI).
	BackendTLSOtherSAN bool
}

// PolicyCapabilities are what a provider can express of the policy of each
// kind of pool: an L4 listener's over TCP or UDP, and the pools of HTTP
// rules. DrainSeconds needs no support: npl-lbsync keeps a draining member
// itself.
type PolicyCapabilities struct {
	// Provider names the provider in the gaps' messages.
	Provider       string
	TCP, UDP, HTTP PolicySupport
}

// PolicyGap is one field of a pool's policy that a provider does not
// express.
type PolicyGap struct {
	Pool string
	// Field is the policy field, as its JSON path with the value when it
	// is an enumeration: "persistence.type=Header", "healthCheck.host".
	Field    string
	Provider string
}

func (g PolicyGap) String() string {
	by := "this provider"
	if g.Provider != "" {
		by = "the " + g.Provider + " provider"
	}
	return fmt.Sprintf("pool %s: policy %s is not supported by %s", g.Pool, g.Field, by)
}

// StripPolicies returns a copy of lb without the policy fields c cannot
// express, and those fields; lb itself is not modified. lb has passed
// Normalize.
func (c PolicyCapabilities) StripPolicies(lb *LoadBalancer) (*LoadBalancer, []PolicyGap) {
	out := lb.Clone()
	var gaps []PolicyGap
	strip := func(p *Pool, s PolicySupport) {
		var fields []string
		p.Policy, fields = s.strip(p.Policy)
		for _, f := range fields {
			gaps = append(gaps, PolicyGap{Pool: p.Name, Field: f, Provider: c.Provider})
		}
	}
	for i := range out.Listeners {
		switch l := &out.Listeners[i]; l.Protocol {
		case TCP:
			strip(&l.Pool, c.TCP)
		case UDP:
			strip(&l.Pool, c.UDP)
		}
	}
	for i := range out.Pools {
		strip(&out.Pools[i], c.HTTP)
	}
	return out, gaps
}

// strip returns p without what s cannot express (nil when nothing is
// left) and the fields it removed.
func (s PolicySupport) strip(in *Policy) (*Policy, []string) {
	if in == nil {
		return nil, nil
	}
	p := in.clone()
	var gone []string
	drop := func(field string) { gone = append(gone, field) }
	if x := p.Persistence; x != nil {
		switch {
		case !slices.Contains(s.Persistence, x.Type):
			drop("persistence.type=" + string(x.Type))
			p.Persistence = nil
		case x.IdleTimeoutSeconds != 0 && !s.PersistenceIdleTimeout:
			drop("persistence.idleTimeoutSeconds")
			x.IdleTimeoutSeconds = 0
		}
	}
	if x := p.HealthCheck; x != nil {
		switch {
		case !slices.Contains(s.HealthChecks, x.Type):
			drop("healthCheck.type=" + string(x.Type))
			p.HealthCheck = nil
		case x.Host != "" && !s.HealthCheckHost:
			drop("healthCheck.host")
			x.Host = ""
		}
	}
	if x := p.Algorithm; x != nil {
		switch {
		case !slices.Contains(s.Algorithms, x.Type):
			drop("algorithm.type=" + string(x.Type))
			p.Algorithm = nil
		case x.HashOn != "" && !slices.Contains(s.HashKeys, x.HashOn):
			drop("algorithm.hashOn=" + string(x.HashOn))
			p.Algorithm = nil
		}
	}
	if p.SlowStartSeconds != 0 && !s.SlowStart {
		drop("slowStartSeconds")
		p.SlowStartSeconds = 0
	}
	if p.MaxConnectionsPerMember != 0 && !s.MaxConnections {
		drop("maxConnectionsPerMember")
		p.MaxConnectionsPerMember = 0
	}
	if p.Timeouts != nil && !s.Timeouts {
		drop("timeouts")
		p.Timeouts = nil
	}
	if x := p.Retry; x != nil {
		switch {
		case !s.Retry:
			drop("retry")
			p.Retry = nil
		default:
			if s.RetryCodes != nil {
				// The codes it can retry on are still retried; each
				// other is named.
				x.Codes = slices.DeleteFunc(x.Codes, func(c int32) bool {
					if slices.Contains(s.RetryCodes, c) {
						return false
					}
					drop(fmt.Sprintf("retry.codes=%d", c))
					return true
				})
				x.Codes = canonicalSlice(x.Codes)
			}
			if x.BackoffMillis != 0 && !s.RetryBackoff {
				drop("retry.backoffMillis")
				x.BackoffMillis = 0
			}
		}
	}
	if x := p.BackendTLS; x != nil {
		uri := slices.ContainsFunc(x.SubjectAltNames, func(n SubjectAltName) bool { return n.Type == SANURI })
		otherSAN := slices.ContainsFunc(x.SubjectAltNames, func(n SubjectAltName) bool { return !strings.EqualFold(n.Value, x.Hostname) })
		switch {
		case !s.BackendTLS:
			drop("backendTLS")
			p.BackendTLS = nil
		case uri && !s.BackendTLSURI:
			// Verifying fewer names than asked would accept a member the
			// policy refuses; without backend TLS the requests fail,
			// which is the safe way to fail.
			drop("backendTLS.subjectAltNames type=URI")
			p.BackendTLS = nil
		case len(x.SubjectAltNames) > 1 && !s.BackendTLSManySANs:
			// Verifying one name of several would refuse members the
			// policy accepts; the same safe way to fail.
			drop("backendTLS.subjectAltNames (more than one)")
			p.BackendTLS = nil
		case otherSAN && !s.BackendTLSOtherSAN:
			// Verifying the hostname instead would accept a member the
			// policy refuses; the same safe way to fail.
			drop("backendTLS.subjectAltNames (other than the hostname)")
			p.BackendTLS = nil
		}
	}
	if p.empty() {
		p = nil
	}
	return p, gone
}

// JoinPolicyGaps is the one wording of gaps in a warning or a condition.
func JoinPolicyGaps(gaps []PolicyGap) string {
	parts := make([]string, len(gaps))
	for i, g := range gaps {
		parts[i] = g.String()
	}
	return strings.Join(parts, "; ")
}
