package providers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// InvalidModelError is the error of a load balancer model that breaks the
// rules of the model (Normalize). No provider is called with such a model,
// so the load balancer stays as it was; the caller can tell "this model is
// wrong" (errors.As) from "the provider failed".
type InvalidModelError struct {
	// LoadBalancer is the model's name, empty when it has none.
	LoadBalancer string
	// Err is the rule the model breaks; ErrNoListeners for one with
	// nothing to serve.
	Err error
}

func (e *InvalidModelError) Error() string {
	if e.LoadBalancer == "" {
		return "invalid load balancer model: " + e.Err.Error()
	}
	return fmt.Sprintf("invalid load balancer model %s: %v", e.LoadBalancer, e.Err)
}

func (e *InvalidModelError) Unwrap() error { return e.Err }

// ErrNoListeners is the rule a model without listeners breaks: a Service
// whose ports a provider cannot serve (SCTP only, say) builds one, and
// applying it would empty or remove a working load balancer.
var ErrNoListeners = errors.New("no listeners: nothing to serve")

// Normalize checks lb against the rules of the model and returns a copy of
// it in canonical form; lb itself is not modified. It is the one check of
// a model: Validated runs it before every Ensure, so a provider receives
// only models that passed it. The rules:
//
//   - a name, a Kind of L4 (or empty) or L7, a requested VIP that is an IP
//     address, and at least one listener (ErrNoListeners);
//   - L4: TCP or UDP listeners, each port 1-65535 once per protocol, each
//     with a pool of its own name; no HTTP routes, shared pools or Ingress;
//   - L7: HTTP and HTTPS listeners without pools, HTTPS exactly when there
//     are certificates, rules and a default pool that name existing pools,
//     paths and hosts as Rule documents, certificates with their PEM data
//     and its fingerprint;
//   - members: IP addresses without zone, ports 1-65535.
//
// The canonical form: Kind empty for L4, IP addresses in their shortest
// form (IPv4-mapped IPv6 as IPv4), listeners, pools, members, rules and
// certificates sorted (SortListeners, SortPools, SortMembers, SortRules,
// TLS by Secret, hosts by name), duplicate members merged, and a named
// pool's members never nil. The error is an *InvalidModelError.
func Normalize(lb *LoadBalancer) (*LoadBalancer, error) {
	if lb == nil {
		return nil, &InvalidModelError{Err: errors.New("no load balancer")}
	}
	out := lb.Clone()
	if err := out.normalize(); err != nil {
		return nil, &InvalidModelError{LoadBalancer: lb.Name, Err: err}
	}
	return out, nil
}

func (lb *LoadBalancer) normalize() error {
	if lb.Name == "" {
		return errors.New("no name")
	}
	if lb.RequestedVIP != "" {
		a, err := canonicalIP(lb.RequestedVIP)
		if err != nil {
			return fmt.Errorf("requested VIP %q: %w", lb.RequestedVIP, err)
		}
		lb.RequestedVIP = a
	}
	if len(lb.Listeners) == 0 {
		return ErrNoListeners
	}
	switch lb.Kind {
	case "", L4:
		lb.Kind = ""
		return lb.normalizeL4()
	case L7:
		return lb.normalizeL7()
	}
	return fmt.Errorf("kind %q is not L4 or L7", lb.Kind)
}

func (lb *LoadBalancer) normalizeL4() error {
	if lb.HTTP != nil || len(lb.Pools) > 0 || lb.Ingress != "" {
		return errors.New("an L4 load balancer has no HTTP routes, shared pools or Ingress")
	}
	SortListeners(lb.Listeners)
	pools := map[string]bool{}
	for i := range lb.Listeners {
		l := &lb.Listeners[i]
		switch {
		case l.Protocol != TCP && l.Protocol != UDP:
			return fmt.Errorf("listener %s/%d: protocol %q is not TCP or UDP", l.Protocol, l.Port, l.Protocol)
		case !validPort(l.Port):
			return fmt.Errorf("listener %s/%d: port out of 1-65535", l.Protocol, l.Port)
		case i > 0 && lb.Listeners[i-1].Protocol == l.Protocol && lb.Listeners[i-1].Port == l.Port:
			return fmt.Errorf("listener %s/%d: given twice", l.Protocol, l.Port)
		case l.Pool.Name == "":
			return fmt.Errorf("listener %s/%d: pool has no name", l.Protocol, l.Port)
		case pools[l.Pool.Name]:
			return fmt.Errorf("listener %s/%d: pool %s is used by another listener", l.Protocol, l.Port, l.Pool.Name)
		}
		pools[l.Pool.Name] = true
		members, err := normalizeMembers(l.Pool)
		if err != nil {
			return err
		}
		l.Pool.Members = members
	}
	return nil
}

func (lb *LoadBalancer) normalizeL7() error {
	if lb.HTTP == nil {
		return errors.New("L7 load balancer without HTTP routes")
	}
	SortListeners(lb.Listeners)
	var https bool
	for i, l := range lb.Listeners {
		switch {
		case l.Protocol != HTTP && l.Protocol != HTTPS:
			return fmt.Errorf("listener %s/%d: an L7 listener is HTTP or HTTPS", l.Protocol, l.Port)
		case !validPort(l.Port):
			return fmt.Errorf("listener %s/%d: port out of 1-65535", l.Protocol, l.Port)
		case l.Pool.Name != "" || len(l.Pool.Members) > 0:
			return fmt.Errorf("listener %s/%d: an L7 listener has no pool of its own", l.Protocol, l.Port)
		case i > 0 && lb.Listeners[i-1].Protocol == l.Protocol && lb.Listeners[i-1].Port == l.Port:
			return fmt.Errorf("listener %s/%d: given twice", l.Protocol, l.Port)
		}
		lb.Listeners[i].Pool = Pool{}
		https = https || l.Protocol == HTTPS
	}
	switch {
	case https && len(lb.HTTP.TLS) == 0:
		return errors.New("an HTTPS listener without TLS certificates")
	case !https && len(lb.HTTP.TLS) > 0:
		return errors.New("TLS certificates without an HTTPS listener")
	}
	SortPools(lb.Pools)
	for i := range lb.Pools {
		p := &lb.Pools[i]
		switch {
		case p.Name == "":
			return errors.New("a pool has no name")
		case i > 0 && lb.Pools[i-1].Name == p.Name:
			return fmt.Errorf("pool %s: given twice", p.Name)
		}
		members, err := normalizeMembers(*p)
		if err != nil {
			return err
		}
		p.Members = members
	}
	hasPool := func(name string) bool {
		_, found := slices.BinarySearchFunc(lb.Pools, name, func(p Pool, n string) int { return cmp.Compare(p.Name, n) })
		return found
	}
	if d := lb.HTTP.DefaultPool; d != "" && !hasPool(d) {
		return fmt.Errorf("default pool %s is not one of the pools", d)
	}
	type ruleKey struct {
		host, path string
		typ        PathType
	}
	rules := map[ruleKey]bool{}
	for _, r := range lb.HTTP.Rules {
		switch {
		case !hasPool(r.Pool):
			return fmt.Errorf("rule %s%s: pool %s is not one of the pools", r.Host, r.Path, r.Pool)
		case !strings.HasPrefix(r.Path, "/"):
			return fmt.Errorf("rule %s%s: the path does not start with /", r.Host, r.Path)
		case r.PathType != PathExact && r.PathType != PathPrefix:
			return fmt.Errorf("rule %s%s: path type %q is not Exact or Prefix", r.Host, r.Path, r.PathType)
		case r.PathType == PathPrefix && r.Path != "/" && strings.HasSuffix(r.Path, "/"):
			return fmt.Errorf("rule %s%s: a Prefix path other than / has no trailing /", r.Host, r.Path)
		case !validHost(r.Host):
			return fmt.Errorf("rule %s%s: %q is not a host name or a *. wildcard", r.Host, r.Path, r.Host)
		}
		key := ruleKey{r.Host, r.Path, r.PathType}
		if rules[key] {
			return fmt.Errorf("rule %s%s (%s): given twice", r.Host, r.Path, r.PathType)
		}
		rules[key] = true
	}
	SortRules(lb.HTTP.Rules)
	slices.SortFunc(lb.HTTP.TLS, func(a, b TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
	for i, c := range lb.HTTP.TLS {
		switch {
		case c.Secret == "":
			return errors.New("a TLS certificate has no Secret")
		case i > 0 && lb.HTTP.TLS[i-1].Secret == c.Secret:
			return fmt.Errorf("TLS Secret %s: given twice", c.Secret)
		case len(c.CertPEM) == 0 || len(c.KeyPEM) == 0:
			return fmt.Errorf("TLS Secret %s: no certificate or key", c.Secret)
		case c.Fingerprint == "":
			return fmt.Errorf("TLS Secret %s: no PEM certificate and no fingerprint", c.Secret)
		case c.Fingerprint != CertFingerprint(c.CertPEM):
			return fmt.Errorf("TLS Secret %s: the fingerprint is not the certificate's", c.Secret)
		}
		slices.Sort(lb.HTTP.TLS[i].Hosts)
	}
	return nil
}

// normalizeMembers checks the members of pool and returns them canonical
// and sorted, never nil.
func normalizeMembers(pool Pool) ([]Member, error) {
	for i, m := range pool.Members {
		ip, err := canonicalIP(m.IP)
		if err != nil {
			return nil, fmt.Errorf("pool %s: member %q: %w", pool.Name, m.IP, err)
		}
		if !validPort(m.Port) {
			return nil, fmt.Errorf("pool %s: member %s:%d: port out of 1-65535", pool.Name, m.IP, m.Port)
		}
		pool.Members[i].IP = ip
	}
	if pool.Members == nil {
		return []Member{}, nil
	}
	return SortMembers(pool.Members), nil
}

func validPort(p int32) bool { return p >= 1 && p <= 65535 }

// canonicalIP returns s as netip spells it, an IPv4-mapped IPv6 address as
// IPv4; an address with a zone is refused, as no load balancer takes one.
func canonicalIP(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", errors.New("not an IP address")
	}
	if a.Zone() != "" {
		return "", errors.New("an IP address with a zone")
	}
	return a.Unmap().String(), nil
}

// Clone returns a deep copy of lb; nil slices stay nil. The PEM data of
// certificates is shared, as nothing modifies it in place.
func (lb *LoadBalancer) Clone() *LoadBalancer {
	out := *lb
	out.VIPs = slices.Clone(lb.VIPs)
	out.Listeners = slices.Clone(lb.Listeners)
	for i := range out.Listeners {
		out.Listeners[i].Pool.Members = slices.Clone(out.Listeners[i].Pool.Members)
	}
	out.Pools = slices.Clone(lb.Pools)
	for i := range out.Pools {
		out.Pools[i].Members = slices.Clone(out.Pools[i].Members)
	}
	if lb.HTTP != nil {
		h := *lb.HTTP
		h.Rules = slices.Clone(h.Rules)
		h.TLS = slices.Clone(h.TLS)
		for i := range h.TLS {
			h.TLS[i].Hosts = slices.Clone(h.TLS[i].Hosts)
		}
		out.HTTP = &h
	}
	return &out
}

// Validated returns p behind the one check of the model: its Ensure runs
// Normalize and hands p the canonical copy, or returns the
// *InvalidModelError without calling p, so a model that breaks a rule (one
// with nothing to serve, say) never changes a load balancer. The registry
// applies it to every provider it opens; applying it again returns p as is.
func Validated(p Provider) Provider {
	if _, done := p.(*validated); done {
		return p
	}
	return &validated{next: p}
}

type validated struct{ next Provider }

func (v *validated) Ensure(ctx context.Context, lb *LoadBalancer) (Status, error) {
	n, err := Normalize(lb)
	if err != nil {
		return Status{}, err
	}
	return v.next.Ensure(ctx, n)
}

// Delete checks the name and kind, and hands p the kind in canonical form
// (empty for L4).
func (v *validated) Delete(ctx context.Context, name string, kind Kind) error {
	switch {
	case name == "":
		return &InvalidModelError{Err: errors.New("delete: no name")}
	case kind == L4:
		kind = ""
	case kind != "" && kind != L7:
		return &InvalidModelError{LoadBalancer: name, Err: fmt.Errorf("delete: kind %q is not L4 or L7", kind)}
	}
	return v.next.Delete(ctx, name, kind)
}

func (v *validated) List(ctx context.Context) ([]LoadBalancer, error) { return v.next.List(ctx) }

// Unwrap returns the provider behind the check.
func (v *validated) Unwrap() Provider { return v.next }

// Unwrap returns the provider behind the decorators that wrap p (those with
// an Unwrap() Provider method, such as Validated's), for the extras a
// provider offers beyond the interface, such as the mock's HTTP handler.
func Unwrap(p Provider) Provider {
	for {
		u, ok := p.(interface{ Unwrap() Provider })
		if !ok {
			return p
		}
		p = u.Unwrap()
	}
}
