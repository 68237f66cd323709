package api

import "github.com/nodeportlocal/npl/lbmodel"

// FromModel is the wire form of a load balancer of the model. Key material
// never crosses as part of it: LoadBalancerRequest.Certificates carries it.
func FromModel(lb *lbmodel.LoadBalancer) LoadBalancer {
	out := LoadBalancer{Name: lb.Name, Service: lb.Service, RequestedVIP: lb.RequestedVIP, VIPs: clone(lb.VIPs),
		Listeners: mapSlice(lb.Listeners, fromListener), Kind: string(lb.Kind), Ingress: lb.Ingress,
		Pools: mapSlice(lb.Pools, fromPool), Gateway: lb.Gateway}
	if h := lb.HTTP; h != nil {
		out.HTTP = &HTTPRoutes{Rules: mapSlice(h.Rules, fromRule), DefaultPool: h.DefaultPool, TLS: mapSlice(h.TLS, fromTLSCert)}
	}
	return out
}

// Model is the load balancer of the model that lb states on the wire.
func (lb LoadBalancer) Model() *lbmodel.LoadBalancer {
	out := &lbmodel.LoadBalancer{Name: lb.Name, Service: lb.Service, RequestedVIP: lb.RequestedVIP, VIPs: clone(lb.VIPs),
		Listeners: mapSlice(lb.Listeners, Listener.model), Kind: lbmodel.Kind(lb.Kind), Ingress: lb.Ingress,
		Pools: mapSlice(lb.Pools, Pool.model), Gateway: lb.Gateway}
	if h := lb.HTTP; h != nil {
		out.HTTP = &lbmodel.HTTPRoutes{Rules: mapSlice(h.Rules, Rule.model), DefaultPool: h.DefaultPool, TLS: mapSlice(h.TLS, TLSCert.model)}
	}
	return out
}

func fromListener(l lbmodel.Listener) Listener {
	out := Listener{Port: l.Port, Protocol: string(l.Protocol), Pool: fromPool(l.Pool),
		SNI: mapSlice(l.SNI, func(r lbmodel.SNIRoute) SNIRoute { return SNIRoute(r) }), Terminate: l.Terminate,
		Hostnames: clone(l.Hostnames)}
	if v := l.ClientValidation; v != nil {
		out.ClientValidation = &ClientValidation{CACertPEM: v.CACertPEM, Optional: v.Optional}
	}
	return out
}

func (l Listener) model() lbmodel.Listener {
	out := lbmodel.Listener{Port: l.Port, Protocol: lbmodel.Protocol(l.Protocol), Pool: l.Pool.model(),
		SNI: mapSlice(l.SNI, func(r SNIRoute) lbmodel.SNIRoute { return lbmodel.SNIRoute(r) }), Terminate: l.Terminate,
		Hostnames: clone(l.Hostnames)}
	if v := l.ClientValidation; v != nil {
		out.ClientValidation = &lbmodel.ClientValidation{CACertPEM: v.CACertPEM, Optional: v.Optional}
	}
	return out
}

func fromPool(p lbmodel.Pool) Pool {
	return Pool{Name: p.Name, AppProtocol: p.AppProtocol, InvalidWeight: p.InvalidWeight,
		Members: mapSlice(p.Members, func(m lbmodel.Member) Member { return Member(m) }), Policy: fromPolicy(p.Policy)}
}

func (p Pool) model() lbmodel.Pool {
	return lbmodel.Pool{Name: p.Name, AppProtocol: p.AppProtocol, InvalidWeight: p.InvalidWeight,
		Members: mapSlice(p.Members, func(m Member) lbmodel.Member { return lbmodel.Member(m) }), Policy: p.Policy.model()}
}

func fromPolicy(p *lbmodel.Policy) *Policy {
	if p == nil {
		return nil
	}
	out := &Policy{SlowStartSeconds: p.SlowStartSeconds, DrainSeconds: clonePtr(p.DrainSeconds),
		MaxConnectionsPerMember: p.MaxConnectionsPerMember}
	if s := p.Persistence; s != nil {
		out.Persistence = &Persistence{Type: string(s.Type), Name: s.Name, TimeoutSeconds: s.TimeoutSeconds,
			IdleTimeoutSeconds: s.IdleTimeoutSeconds, Permanent: s.Permanent}
	}
	if c := p.HealthCheck; c != nil {
		out.HealthCheck = &HealthCheck{Type: string(c.Type), Path: c.Path, Host: c.Host,
			ExpectedStatuses: mapSlice(c.ExpectedStatuses, func(r lbmodel.StatusRange) StatusRange { return StatusRange(r) }),
			IntervalSeconds:  c.IntervalSeconds, TimeoutSeconds: c.TimeoutSeconds, Rise: c.Rise, Fall: c.Fall}
	}
	if a := p.Algorithm; a != nil {
		out.Algorithm = &Algorithm{Type: string(a.Type), HashOn: string(a.HashOn), HashName: a.HashName}
	}
	if t := p.Timeouts; t != nil {
		out.Timeouts = &Timeouts{RequestMillis: t.RequestMillis, BackendRequestMillis: t.BackendRequestMillis}
	}
	if r := p.Retry; r != nil {
		out.Retry = &Retry{Attempts: r.Attempts, Codes: clone(r.Codes), BackoffMillis: r.BackoffMillis}
	}
	if t := p.BackendTLS; t != nil {
		out.BackendTLS = &BackendTLS{Hostname: t.Hostname, CACertPEM: t.CACertPEM, SystemCAs: t.SystemCAs,
			SubjectAltNames: mapSlice(t.SubjectAltNames, func(n lbmodel.SubjectAltName) SubjectAltName {
				return SubjectAltName{Type: string(n.Type), Value: n.Value}
			})}
	}
	return out
}

func (p *Policy) model() *lbmodel.Policy {
	if p == nil {
		return nil
	}
	out := &lbmodel.Policy{SlowStartSeconds: p.SlowStartSeconds, DrainSeconds: clonePtr(p.DrainSeconds),
		MaxConnectionsPerMember: p.MaxConnectionsPerMember}
	if s := p.Persistence; s != nil {
		out.Persistence = &lbmodel.Persistence{Type: lbmodel.PersistenceType(s.Type), Name: s.Name, TimeoutSeconds: s.TimeoutSeconds,
			IdleTimeoutSeconds: s.IdleTimeoutSeconds, Permanent: s.Permanent}
	}
	if c := p.HealthCheck; c != nil {
		out.HealthCheck = &lbmodel.HealthCheck{Type: lbmodel.HealthCheckType(c.Type), Path: c.Path, Host: c.Host,
			ExpectedStatuses: mapSlice(c.ExpectedStatuses, func(r StatusRange) lbmodel.StatusRange { return lbmodel.StatusRange(r) }),
			IntervalSeconds:  c.IntervalSeconds, TimeoutSeconds: c.TimeoutSeconds, Rise: c.Rise, Fall: c.Fall}
	}
	if a := p.Algorithm; a != nil {
		out.Algorithm = &lbmodel.Algorithm{Type: lbmodel.AlgorithmType(a.Type), HashOn: lbmodel.HashKey(a.HashOn), HashName: a.HashName}
	}
	if t := p.Timeouts; t != nil {
		out.Timeouts = &lbmodel.Timeouts{RequestMillis: t.RequestMillis, BackendRequestMillis: t.BackendRequestMillis}
	}
	if r := p.Retry; r != nil {
		out.Retry = &lbmodel.Retry{Attempts: r.Attempts, Codes: clone(r.Codes), BackoffMillis: r.BackoffMillis}
	}
	if t := p.BackendTLS; t != nil {
		out.BackendTLS = &lbmodel.BackendTLS{Hostname: t.Hostname, CACertPEM: t.CACertPEM, SystemCAs: t.SystemCAs,
			SubjectAltNames: mapSlice(t.SubjectAltNames, func(n SubjectAltName) lbmodel.SubjectAltName {
				return lbmodel.SubjectAltName{Type: lbmodel.SubjectAltNameType(n.Type), Value: n.Value}
			})}
	}
	return out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func fromRule(r lbmodel.Rule) Rule {
	out := Rule{Host: r.Host, Path: r.Path, PathType: string(r.PathType), Pool: r.Pool, Ports: clone(r.Ports),
		Method: r.Method, Order: r.Order, FixedStatus: r.FixedStatus,
		Headers:        mapSlice(r.Headers, func(v lbmodel.ValueMatch) ValueMatch { return ValueMatch(v) }),
		Query:          mapSlice(r.Query, func(v lbmodel.ValueMatch) ValueMatch { return ValueMatch(v) }),
		RequestHeaders: fromFilter(r.RequestHeaders), ResponseHeaders: fromFilter(r.ResponseHeaders),
		Backends: mapSlice(r.Backends, func(b lbmodel.RuleBackend) RuleBackend {
			return RuleBackend{Pool: b.Pool, Weight: b.Weight, RequestHeaders: fromFilter(b.RequestHeaders)}
		})}
	if c := r.CORS; c != nil {
		out.CORS = &CORS{AllowOrigins: clone(c.AllowOrigins), AllowCredentials: c.AllowCredentials, AllowMethods: clone(c.AllowMethods),
			AllowHeaders: clone(c.AllowHeaders), ExposeHeaders: clone(c.ExposeHeaders), MaxAgeSeconds: c.MaxAgeSeconds}
	}
	if d := r.Redirect; d != nil {
		out.Redirect = &Redirect{Scheme: d.Scheme, Hostname: d.Hostname, Port: d.Port, Path: fromPathModifier(d.Path), StatusCode: d.StatusCode}
	}
	if w := r.Rewrite; w != nil {
		out.Rewrite = &Rewrite{Hostname: w.Hostname, Path: fromPathModifier(w.Path)}
	}
	return out
}

func (r Rule) model() lbmodel.Rule {
	out := lbmodel.Rule{Host: r.Host, Path: r.Path, PathType: lbmodel.PathType(r.PathType), Pool: r.Pool, Ports: clone(r.Ports),
		Method: r.Method, Order: r.Order, FixedStatus: r.FixedStatus,
		Headers:        mapSlice(r.Headers, func(v ValueMatch) lbmodel.ValueMatch { return lbmodel.ValueMatch(v) }),
		Query:          mapSlice(r.Query, func(v ValueMatch) lbmodel.ValueMatch { return lbmodel.ValueMatch(v) }),
		RequestHeaders: r.RequestHeaders.model(), ResponseHeaders: r.ResponseHeaders.model(),
		Backends: mapSlice(r.Backends, func(b RuleBackend) lbmodel.RuleBackend {
			return lbmodel.RuleBackend{Pool: b.Pool, Weight: b.Weight, RequestHeaders: b.RequestHeaders.model()}
		})}
	if c := r.CORS; c != nil {
		out.CORS = &lbmodel.CORS{AllowOrigins: clone(c.AllowOrigins), AllowCredentials: c.AllowCredentials, AllowMethods: clone(c.AllowMethods),
			AllowHeaders: clone(c.AllowHeaders), ExposeHeaders: clone(c.ExposeHeaders), MaxAgeSeconds: c.MaxAgeSeconds}
	}
	if d := r.Redirect; d != nil {
		out.Redirect = &lbmodel.Redirect{Scheme: d.Scheme, Hostname: d.Hostname, Port: d.Port, Path: d.Path.model(), StatusCode: d.StatusCode}
	}
	if w := r.Rewrite; w != nil {
		out.Rewrite = &lbmodel.Rewrite{Hostname: w.Hostname, Path: w.Path.model()}
	}
	return out
}

func fromFilter(f *lbmodel.HeaderFilter) *HeaderFilter {
	if f == nil {
		return nil
	}
	return &HeaderFilter{Set: mapSlice(f.Set, func(h lbmodel.Header) Header { return Header(h) }),
		Add: mapSlice(f.Add, func(h lbmodel.Header) Header { return Header(h) }), Remove: clone(f.Remove)}
}

func (f *HeaderFilter) model() *lbmodel.HeaderFilter {
	if f == nil {
		return nil
	}
	return &lbmodel.HeaderFilter{Set: mapSlice(f.Set, func(h Header) lbmodel.Header { return lbmodel.Header(h) }),
		Add: mapSlice(f.Add, func(h Header) lbmodel.Header { return lbmodel.Header(h) }), Remove: clone(f.Remove)}
}

func fromPathModifier(m *lbmodel.PathModifier) *PathModifier {
	if m == nil {
		return nil
	}
	return &PathModifier{Type: m.Type, Value: m.Value}
}

func (m *PathModifier) model() *lbmodel.PathModifier {
	if m == nil {
		return nil
	}
	return &lbmodel.PathModifier{Type: m.Type, Value: m.Value}
}

func fromTLSCert(c lbmodel.TLSCert) TLSCert {
	return TLSCert{Secret: c.Secret, Hosts: clone(c.Hosts), Fingerprint: c.Fingerprint, Ports: clone(c.Ports)}
}

func (c TLSCert) model() lbmodel.TLSCert {
	return lbmodel.TLSCert{Secret: c.Secret, Hosts: clone(c.Hosts), Fingerprint: c.Fingerprint, Ports: clone(c.Ports)}
}

// mapSlice maps s element by element; nil stays nil and empty stays empty,
// as the JSON of the two differs ("members": null and []).
func mapSlice[S, T any](s []S, f func(S) T) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

func clone[T any](s []T) []T { return mapSlice(s, func(v T) T { return v }) }
