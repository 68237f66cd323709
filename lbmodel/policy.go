package lbmodel

import (
	"cmp"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
)

// Policy is the traffic policy of a pool: how the load balancer picks its
// members, keeps a client on one, checks their health and ramps a new one
// up, how long a draining one keeps its connections, and, for the pools of
// HTTP rules, how long it waits for an answer, whether it retries and how
// it speaks TLS to the members. Each member is one Pod, so persistence and
// consistent hashing reach the Pod itself. A nil Policy, like a nil field,
// leaves the load balancer's own default: no persistence, a TCP connect
// check, no slow start, and its default algorithm (round robin on HAProxy
// and BIG-IP, least connections on Avi), so an explicit RoundRobin is kept.
type Policy struct {
	// Persistence keeps a client on the member it reached first.
	Persistence *Persistence `json:"persistence,omitempty"`
	// HealthCheck replaces the default check of every member.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// Algorithm picks the member of a new connection or request.
	Algorithm *Algorithm `json:"algorithm,omitempty"`
	// SlowStartSeconds ramps the share of a member that comes up (new, or
	// back from a failed check) from nothing to its weight over this many
	// seconds, 1-3600; 0 gives it its whole share at once.
	SlowStartSeconds int32 `json:"slowStartSeconds,omitempty"`
	// DrainSeconds, when set, is how long a member of a terminating Pod
	// stays in the pool, disabled, so that its open connections end on
	// their own (0-86400); unset, npl-lbsync's drainSeconds applies.
	DrainSeconds *int32 `json:"drainSeconds,omitempty"`
	// MaxConnectionsPerMember caps the concurrent connections the load
	// balancer opens to each member, 1-1000000; 0 sets no cap.
	MaxConnectionsPerMember int32 `json:"maxConnectionsPerMember,omitempty"`
	// Timeouts, Retry and BackendTLS are for the pools of HTTP rules only.
	Timeouts   *Timeouts   `json:"timeouts,omitempty"`
	Retry      *Retry      `json:"retry,omitempty"`
	BackendTLS *BackendTLS `json:"backendTLS,omitempty"`
}

// PersistenceType says what keeps a client on its member.
type PersistenceType string

const (
	// PersistSourceIP keeps the connections of a client address on one
	// member (Service sessionAffinity ClientIP).
	PersistSourceIP PersistenceType = "SourceIP"
	// PersistCookie keeps the requests that carry the cookie the load
	// balancer set on one member (Gateway API sessionPersistence Cookie).
	PersistCookie PersistenceType = "Cookie"
	// PersistHeader keeps the requests with the same value of a header on
	// one member (Gateway API sessionPersistence Header).
	PersistHeader PersistenceType = "Header"
)

// Persistence keeps a client on the member it reached first.
type Persistence struct {
	Type PersistenceType `json:"type"`
	// Name is the cookie's or the header's name; empty for SourceIP.
	Name string `json:"name,omitempty"`
	// TimeoutSeconds is how long a session lasts, 0-31536000 (0: as long
	// as the load balancer keeps it): for SourceIP the time a client may
	// stay idle and keep its member (Kubernetes' timeoutSeconds, 10800 by
	// default), for a cookie or a header the absolute lifetime.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// IdleTimeoutSeconds ends a cookie or header session idle this long,
	// 0-31536000 (0: never).
	IdleTimeoutSeconds int32 `json:"idleTimeoutSeconds,omitempty"`
	// Permanent gives the cookie an expiry (lifetime TimeoutSeconds), so
	// that it outlives the browser session; otherwise it is a session
	// cookie.
	Permanent bool `json:"permanent,omitempty"`
}

// HealthCheckType says how a member's health is checked.
type HealthCheckType string

const (
	// CheckTCP connects to the member.
	CheckTCP HealthCheckType = "TCP"
	// CheckHTTP sends GET Path to the member and expects one of
	// ExpectedStatuses.
	CheckHTTP HealthCheckType = "HTTP"
)

// HealthCheck is the active check of every member of a pool.
type HealthCheck struct {
	Type HealthCheckType `json:"type"`
	// Path is the request path of an HTTP check; it starts with "/".
	Path string `json:"path,omitempty"`
	// Host is the Host header of an HTTP check; empty: the member's
	// address.
	Host string `json:"host,omitempty"`
	// ExpectedStatuses are the answers of an HTTP check that mean healthy,
	// as sorted, disjoint ranges; empty: 200-399.
	ExpectedStatuses []StatusRange `json:"expectedStatuses,omitempty"`
	// IntervalSeconds between checks (1-3600), TimeoutSeconds a check may
	// take (1-3600, at most the interval), Rise successes that bring a
	// member back and Fall failures that take it out (1-10 each); 0 is
	// the provider's default.
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`
	TimeoutSeconds  int32 `json:"timeoutSeconds,omitempty"`
	Rise            int32 `json:"rise,omitempty"`
	Fall            int32 `json:"fall,omitempty"`
}

// StatusRange is the HTTP statuses from Min to Max, both included.
type StatusRange struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// AlgorithmType says how a member is picked.
type AlgorithmType string

const (
	// RoundRobin takes the members in turn, by weight.
	RoundRobin AlgorithmType = "RoundRobin"
	// LeastConnections takes the member with the fewest open connections.
	LeastConnections AlgorithmType = "LeastConnections"
	// ConsistentHash takes the member a hash of HashOn maps to, so that a
	// change of the members moves as few keys as possible.
	ConsistentHash AlgorithmType = "ConsistentHash"
)

// HashKey is what a consistent hash is computed over.
type HashKey string

const (
	// HashSourceIP hashes the client's address.
	HashSourceIP HashKey = "SourceIP"
	// HashHeader hashes the value of the header HashName.
	HashHeader HashKey = "Header"
	// HashCookie hashes the value of the cookie HashName.
	HashCookie HashKey = "Cookie"
)

// Algorithm picks the member of a new connection or request.
type Algorithm struct {
	Type AlgorithmType `json:"type"`
	// HashOn is set for ConsistentHash only; HashName names the header or
	// cookie of HashHeader and HashCookie.
	HashOn   HashKey `json:"hashOn,omitempty"`
	HashName string  `json:"hashName,omitempty"`
}

// Timeouts bound how long an HTTP request may take, in milliseconds
// (1-86400000; 0: none).
type Timeouts struct {
	// RequestMillis is the whole request, from the client's first byte to
	// the last byte of the answer, retries included.
	RequestMillis int32 `json:"requestMillis,omitempty"`
	// BackendRequestMillis is one request to a member; at most
	// RequestMillis when both are set.
	BackendRequestMillis int32 `json:"backendRequestMillis,omitempty"`
}

// Retry sends a failed HTTP request to another member.
type Retry struct {
	// Attempts is how many times a request is retried, 1-10.
	Attempts int32 `json:"attempts"`
	// Codes are the answers (400-599, sorted) that are retried besides a
	// connection that fails.
	Codes []int32 `json:"codes,omitempty"`
	// BackoffMillis is the wait before a retry (0-86400000; 0: none).
	BackoffMillis int32 `json:"backoffMillis,omitempty"`
}

// SubjectAltNameType says what a subject alternative name names.
type SubjectAltNameType string

const (
	// SANHostname is a DNS name.
	SANHostname SubjectAltNameType = "Hostname"
	// SANURI is a URI.
	SANURI SubjectAltNameType = "URI"
)

// SubjectAltName is a name the member's certificate must carry.
type SubjectAltName struct {
	Type  SubjectAltNameType `json:"type"`
	Value string             `json:"value"`
}

// BackendTLS makes the load balancer speak TLS to the members and verify
// them (Gateway API BackendTLSPolicy).
type BackendTLS struct {
	// Hostname is the server name sent (SNI) and, without
	// SubjectAltNames, the name the certificate must carry.
	Hostname string `json:"hostname"`
	// SubjectAltNames, when set, are the names one of which the
	// certificate must carry instead of Hostname, sorted.
	SubjectAltNames []SubjectAltName `json:"subjectAltNames,omitempty"`
	// CACertPEM holds the CA certificates (PEM) the members' certificates
	// are verified with; SystemCAs uses the load balancer's own trust
	// store instead. Exactly one is set.
	CACertPEM string `json:"caCertPEM,omitempty"`
	SystemCAs bool   `json:"systemCAs,omitempty"`
}

// Limits of a policy's values.
const (
	maxSessionSeconds = 31536000 // a year
	maxCheckSeconds   = 3600
	maxCheckCount     = 10
	maxSlowStart      = 3600
	maxDrainSeconds   = 86400
	maxConnections    = 1000000
	maxMillis         = 86400000 // a day
	maxRetryAttempts  = 10
)

// normalizePolicy checks the policy of pool p and returns it in canonical
// form (nil when it holds nothing). http says whether the pool serves HTTP
// rules: only such a pool has cookie or header persistence, a hash on a
// header or a cookie, timeouts, retries or backend TLS.
func normalizePolicy(pool string, in *Policy, http bool) (*Policy, error) {
	if in == nil {
		return nil, nil
	}
	p := in.clone()
	fail := func(format string, a ...any) (*Policy, error) {
		return nil, fmt.Errorf("pool %s: policy: "+format, append([]any{pool}, a...)...)
	}
	if s := p.Persistence; s != nil {
		switch s.Type {
		case PersistSourceIP:
			if s.Name != "" || s.IdleTimeoutSeconds != 0 || s.Permanent {
				return fail("source IP persistence has no name, idle timeout or permanent cookie")
			}
		case PersistCookie, PersistHeader:
			switch {
			case !http:
				return fail("%s persistence needs HTTP: only the pools of HTTP rules have it", s.Type)
			case !isToken(s.Name):
				return fail("%s persistence: name %q is not a token", s.Type, s.Name)
			case s.Permanent && s.Type != PersistCookie:
				return fail("only a cookie is permanent")
			case s.Permanent && s.TimeoutSeconds == 0:
				return fail("a permanent cookie needs a timeout, its lifetime")
			}
		default:
			return fail("persistence type %q is not SourceIP, Cookie or Header", s.Type)
		}
		if !inRange(s.TimeoutSeconds, 0, maxSessionSeconds) || !inRange(s.IdleTimeoutSeconds, 0, maxSessionSeconds) {
			return fail("persistence timeouts out of 0-%d seconds", maxSessionSeconds)
		}
	}
	if c := p.HealthCheck; c != nil {
		switch c.Type {
		case CheckTCP:
			if c.Path != "" || c.Host != "" || len(c.ExpectedStatuses) > 0 {
				return fail("a TCP health check has no path, host or expected statuses")
			}
		case CheckHTTP:
			switch {
			case !strings.HasPrefix(c.Path, "/") || strings.ContainsFunc(c.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
				return fail("health check path %q does not start with / or holds a blank or control character", c.Path)
			case c.Host != "" && (!validHost(c.Host) || strings.HasPrefix(c.Host, "*")):
				return fail("health check host %q is not a host name", c.Host)
			}
			ranges, err := normalizeStatusRanges(c.ExpectedStatuses)
			if err != nil {
				return fail("health check: %v", err)
			}
			c.ExpectedStatuses = ranges
		default:
			return fail("health check type %q is not TCP or HTTP", c.Type)
		}
		switch {
		case !inRange(c.IntervalSeconds, 0, maxCheckSeconds) || !inRange(c.TimeoutSeconds, 0, maxCheckSeconds):
			return fail("health check interval and timeout out of 1-%d seconds", maxCheckSeconds)
		case c.IntervalSeconds != 0 && c.TimeoutSeconds > c.IntervalSeconds:
			return fail("health check timeout %ds is longer than its interval %ds", c.TimeoutSeconds, c.IntervalSeconds)
		case !inRange(c.Rise, 0, maxCheckCount) || !inRange(c.Fall, 0, maxCheckCount):
			return fail("health check rise and fall out of 1-%d", maxCheckCount)
		}
	}
	if a := p.Algorithm; a != nil {
		switch a.Type {
		case RoundRobin, LeastConnections:
			if a.HashOn != "" || a.HashName != "" {
				return fail("only a consistent hash has a hash key")
			}
		case ConsistentHash:
			switch a.HashOn {
			case HashSourceIP:
				if a.HashName != "" {
					return fail("a hash on the source address has no name")
				}
			case HashHeader, HashCookie:
				switch {
				case !http:
					return fail("a hash on a %s needs HTTP: only the pools of HTTP rules have it", strings.ToLower(string(a.HashOn)))
				case !isToken(a.HashName):
					return fail("hash %s name %q is not a token", strings.ToLower(string(a.HashOn)), a.HashName)
				}
			default:
				return fail("consistent hash on %q is not SourceIP, Header or Cookie", a.HashOn)
			}
		default:
			return fail("algorithm %q is not RoundRobin, LeastConnections or ConsistentHash", a.Type)
		}
	}
	switch {
	case !inRange(p.SlowStartSeconds, 0, maxSlowStart):
		return fail("slow start out of 0-%d seconds", maxSlowStart)
	case p.DrainSeconds != nil && !inRange(*p.DrainSeconds, 0, maxDrainSeconds):
		return fail("drain out of 0-%d seconds", maxDrainSeconds)
	case !inRange(p.MaxConnectionsPerMember, 0, maxConnections):
		return fail("connections per member out of 0-%d", maxConnections)
	case !http && (p.Timeouts != nil || p.Retry != nil || p.BackendTLS != nil):
		return fail("timeouts, retries and backend TLS need HTTP: only the pools of HTTP rules have them")
	}
	if t := p.Timeouts; t != nil {
		switch {
		case !inRange(t.RequestMillis, 0, maxMillis) || !inRange(t.BackendRequestMillis, 0, maxMillis):
			return fail("timeouts out of 0-%d ms", maxMillis)
		case t.RequestMillis != 0 && t.BackendRequestMillis > t.RequestMillis:
			return fail("the backend request timeout %dms is longer than the request timeout %dms", t.BackendRequestMillis, t.RequestMillis)
		}
		if *t == (Timeouts{}) {
			p.Timeouts = nil
		}
	}
	if r := p.Retry; r != nil {
		if !inRange(r.Attempts, 1, maxRetryAttempts) || !inRange(r.BackoffMillis, 0, maxMillis) {
			return fail("retry attempts out of 1-%d or backoff out of 0-%d ms", maxRetryAttempts, maxMillis)
		}
		slices.Sort(r.Codes)
		r.Codes = canonicalSlice(slices.Compact(r.Codes))
		for _, c := range r.Codes {
			if !inRange(c, 400, 599) {
				return fail("retry code %d is out of 400-599", c)
			}
		}
	}
	if t := p.BackendTLS; t != nil {
		switch {
		case !validHost(t.Hostname) || t.Hostname == "" || strings.HasPrefix(t.Hostname, "*"):
			return fail("backend TLS hostname %q is not a host name", t.Hostname)
		case (t.CACertPEM == "") == !t.SystemCAs:
			return fail("backend TLS needs exactly one of CA certificates and the system's")
		case t.CACertPEM != "" && !holdsCertificate(t.CACertPEM):
			return fail("backend TLS CA certificates hold no PEM certificate")
		}
		slices.SortFunc(t.SubjectAltNames, func(a, b SubjectAltName) int {
			return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Value, b.Value))
		})
		t.SubjectAltNames = canonicalSlice(slices.Compact(t.SubjectAltNames))
		for _, n := range t.SubjectAltNames {
			switch {
			case n.Type == SANHostname && (!validHost(n.Value) || n.Value == ""):
				return fail("backend TLS subject alternative name %q is not a host name", n.Value)
			case n.Type == SANURI && (!strings.Contains(n.Value, ":") || strings.ContainsFunc(n.Value, func(r rune) bool { return r <= ' ' || r == 0x7f })):
				return fail("backend TLS subject alternative name %q is not a URI", n.Value)
			case n.Type != SANHostname && n.Type != SANURI:
				return fail("backend TLS subject alternative name type %q is not Hostname or URI", n.Type)
			}
		}
	}
	if p.empty() {
		return nil, nil
	}
	return p, nil
}

// normalizeStatusRanges checks HTTP status ranges (100-599, Min at most
// Max) and returns them sorted and merged, nil for none.
func normalizeStatusRanges(rs []StatusRange) ([]StatusRange, error) {
	rs = slices.Clone(rs)
	for _, r := range rs {
		if !inRange(r.Min, 100, 599) || !inRange(r.Max, r.Min, 599) {
			return nil, fmt.Errorf("expected statuses %d-%d are not a range within 100-599", r.Min, r.Max)
		}
	}
	slices.SortFunc(rs, func(a, b StatusRange) int { return cmp.Or(cmp.Compare(a.Min, b.Min), cmp.Compare(a.Max, b.Max)) })
	var out []StatusRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.Min <= out[n-1].Max+1 {
			out[n-1].Max = max(out[n-1].Max, r.Max)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func inRange(v, lo, hi int32) bool { return v >= lo && v <= hi }

// holdsCertificate reports whether data holds at least one PEM
// CERTIFICATE block.
func holdsCertificate(data string) bool {
	for rest := []byte(data); ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if b.Type == "CERTIFICATE" {
			return true
		}
	}
}

// httpOnly reports whether p holds a field only the pools of HTTP rules
// have.
func (p *Policy) httpOnly() bool {
	if p == nil {
		return false
	}
	return p.Timeouts != nil || p.Retry != nil || p.BackendTLS != nil ||
		p.Persistence != nil && p.Persistence.Type != PersistSourceIP ||
		p.Algorithm != nil && (p.Algorithm.HashOn == HashHeader || p.Algorithm.HashOn == HashCookie)
}

// empty reports whether p changes nothing of the defaults.
func (p *Policy) empty() bool {
	return p.Persistence == nil && p.HealthCheck == nil && p.Algorithm == nil && p.SlowStartSeconds == 0 &&
		p.DrainSeconds == nil && p.MaxConnectionsPerMember == 0 && p.Timeouts == nil && p.Retry == nil && p.BackendTLS == nil
}

// Clone returns a deep copy of p; nil stays nil.
func (p *Policy) Clone() *Policy { return p.clone() }

// clone returns a deep copy of p; nil stays nil.
func (p *Policy) clone() *Policy {
	if p == nil {
		return nil
	}
	out := *p
	out.Persistence = clonePtr(p.Persistence)
	if p.HealthCheck != nil {
		c := *p.HealthCheck
		c.ExpectedStatuses = slices.Clone(c.ExpectedStatuses)
		out.HealthCheck = &c
	}
	out.Algorithm = clonePtr(p.Algorithm)
	out.DrainSeconds = clonePtr(p.DrainSeconds)
	out.Timeouts = clonePtr(p.Timeouts)
	if p.Retry != nil {
		r := *p.Retry
		r.Codes = slices.Clone(r.Codes)
		out.Retry = &r
	}
	if p.BackendTLS != nil {
		t := *p.BackendTLS
		t.SubjectAltNames = slices.Clone(t.SubjectAltNames)
		out.BackendTLS = &t
	}
	return &out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
