package lbmodel

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
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

// Normalize checks lb against the rules of the model (normalize and the
// checks it calls, one per part) and returns a copy of it in canonical
// form: sorted, addresses in their shortest form, duplicate members merged,
// defaults and empty lists spelled one way, so that two models that mean
// the same compare equal (SameModel). lb itself is not modified. It is the
// one check of a model: Validated runs it before every Ensure, so a
// provider receives only models that passed it. The error is an
// *InvalidModelError.
func Normalize(lb *LoadBalancer) (*LoadBalancer, error) {
	if lb == nil {
		return nil, &InvalidModelError{Err: errors.New("no load balancer")}
	}
	out := lb.Clone()
	if err := out.normalize(); err != nil {
		return nil, &InvalidModelError{LoadBalancer: lb.Name, Err: err}
	}
	if n := Size(out); n > MaxModelBytes {
		return nil, &InvalidModelError{LoadBalancer: lb.Name, Err: fmt.Errorf("%d bytes, more than %d", n, MaxModelBytes)}
	}
	return out, nil
}

func (lb *LoadBalancer) normalize() error {
	if lb.Name == "" {
		return errors.New("no name")
	}
	if err := checkName("name", lb.Name); err != nil {
		return err
	}
	for _, o := range []struct{ what, v string }{{"service", lb.Service}, {"ingress", lb.Ingress}, {"gateway", lb.Gateway}} {
		if o.v != "" && !validObjectRef(o.v) {
			return fmt.Errorf("%s %q is not namespace/name of Kubernetes names", o.what, o.v)
		}
	}
	if lb.RequestedVIP != "" {
		a, err := canonicalIP(lb.RequestedVIP)
		if err == nil {
			err = UsableVIP(netip.MustParseAddr(a))
		}
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
		case checkName("pool name", l.Pool.Name) != nil:
			return fmt.Errorf("listener %s/%d: %w", l.Protocol, l.Port, checkName("pool name", l.Pool.Name))
		case pools[l.Pool.Name]:
			return fmt.Errorf("listener %s/%d: pool %s is used by another listener", l.Protocol, l.Port, l.Pool.Name)
		case len(l.SNI) > 0 || l.Terminate:
			return fmt.Errorf("listener %s/%d: only a TLS listener has SNI routes or terminates", l.Protocol, l.Port)
		case l.ClientValidation != nil:
			return fmt.Errorf("listener %s/%d: only an HTTPS listener of a Gateway verifies client certificates", l.Protocol, l.Port)
		case len(l.Hostnames) > 0:
			return fmt.Errorf("listener %s/%d: only an HTTPS listener of a Gateway has hostnames", l.Protocol, l.Port)
		case l.Pool.AppProtocol != "":
			return fmt.Errorf("listener %s/%d: pool %s: an L4 pool has no appProtocol", l.Protocol, l.Port, l.Pool.Name)
		}
		pools[l.Pool.Name] = true
		if err := normalizePool(&l.Pool, false, false); err != nil {
			return err
		}
	}
	return nil
}

func (lb *LoadBalancer) normalizeL7() error {
	if lb.HTTP == nil {
		return errors.New("L7 load balancer without HTTP routes")
	}
	SortListeners(lb.Listeners)
	// ports are the HTTP, HTTPS and TLS listeners (rules and certificates
	// name them); TCP listeners share their port space, UDP has its own.
	ports := map[int32]Protocol{}
	used := map[Protocol]map[int32]bool{TCP: {}, UDP: {}}
	for i := range lb.Listeners {
		l := &lb.Listeners[i]
		transport := TCP
		switch {
		case l.Protocol != HTTP && l.Protocol != HTTPS && l.Protocol != TLS && l.Protocol != TCP && l.Protocol != UDP:
			return fmt.Errorf("listener %s/%d: protocol %q is not HTTP, HTTPS, TLS, TCP or UDP", l.Protocol, l.Port, l.Protocol)
		case l.Protocol != HTTP && l.Protocol != HTTPS && lb.Gateway == "":
			return fmt.Errorf("listener %s/%d: an L7 listener is HTTP or HTTPS (TLS, TCP and UDP only in a Gateway's)", l.Protocol, l.Port)
		case !validPort(l.Port):
			return fmt.Errorf("listener %s/%d: port out of 1-65535", l.Protocol, l.Port)
		}
		if l.Protocol == UDP {
			transport = UDP
		}
		if used[transport][l.Port] {
			return fmt.Errorf("listener %s/%d: given twice", l.Protocol, l.Port)
		}
		used[transport][l.Port] = true
		if l.Protocol != TLS && (len(l.SNI) > 0 || l.Terminate) {
			return fmt.Errorf("listener %s/%d: only a TLS listener has SNI routes or terminates", l.Protocol, l.Port)
		}
		if err := lb.checkClientValidation(l); err != nil {
			return err
		}
		if err := lb.normalizeHostnames(l); err != nil {
			return err
		}
		switch l.Protocol {
		case TCP, UDP:
			if l.Pool.Name == "" {
				return fmt.Errorf("listener %s/%d: pool has no name", l.Protocol, l.Port)
			}
			if err := checkName("pool name", l.Pool.Name); err != nil {
				return fmt.Errorf("listener %s/%d: %w", l.Protocol, l.Port, err)
			}
			if l.Pool.AppProtocol != "" {
				return fmt.Errorf("listener %s/%d: pool %s: a %s listener's pool has no appProtocol", l.Protocol, l.Port, l.Pool.Name, l.Protocol)
			}
			if err := normalizePool(&l.Pool, false, false); err != nil {
				return err
			}
		default:
			if l.Pool.Name != "" || len(l.Pool.Members) > 0 {
				return fmt.Errorf("listener %s/%d: no pool of its own: its routes pick the pools", l.Protocol, l.Port)
			}
			l.Pool = Pool{}
			ports[l.Port] = l.Protocol
		}
	}
	if err := lb.normalizeTLS(ports); err != nil {
		return err
	}
	SortPools(lb.Pools)
	for i := range lb.Pools {
		p := &lb.Pools[i]
		switch {
		case p.Name == "":
			return errors.New("a pool has no name")
		case checkName("pool name", p.Name) != nil:
			return checkName("pool name", p.Name)
		case i > 0 && lb.Pools[i-1].Name == p.Name:
			return fmt.Errorf("pool %s: given twice", p.Name)
		case p.AppProtocol != "" && p.AppProtocol != AppProtocolH2C:
			return fmt.Errorf("pool %s: appProtocol %q is not empty or %s", p.Name, p.AppProtocol, AppProtocolH2C)
		}
		if err := normalizePool(p, lb.Gateway != "", true); err != nil {
			return err
		}
	}
	pool := func(name string) *Pool {
		i, found := slices.BinarySearchFunc(lb.Pools, name, func(p Pool, n string) int { return cmp.Compare(p.Name, n) })
		if !found {
			return nil
		}
		return &lb.Pools[i]
	}
	hasPool := func(name string) bool { return pool(name) != nil }
	if err := lb.normalizeListenerRoutes(pool); err != nil {
		return err
	}
	if d := lb.HTTP.DefaultPool; d != "" && !hasPool(d) {
		return fmt.Errorf("default pool %s is not one of the pools", d)
	}
	keys := map[string]bool{}
	for i := range lb.HTTP.Rules {
		r := &lb.HTTP.Rules[i]
		if err := r.normalize(ports, hasPool); err != nil {
			return fmt.Errorf("rule %s%s (%s): %w", r.Host, r.Path, r.PathType, err)
		}
		key := r.MatchKey()
		if keys[key] {
			return fmt.Errorf("rule %s%s (%s): another rule matches the same requests (host, path, ports, method, headers, query)",
				r.Host, r.Path, r.PathType)
		}
		keys[key] = true
	}
	SortRules(lb.HTTP.Rules)
	return nil
}

// normalizeListenerRoutes checks what the TCP, UDP and TLS listeners of a
// Gateway's load balancer forward to: a TCP or UDP listener's pool has a
// name no other listener's nor a shared pool has; a TLS listener's SNI
// routes have valid hosts, each once, and name shared pools (pool returns
// the one of a name, nil for none) without an invalid share. The routes
// end sorted by SortSNI, nil for none.
func (lb *LoadBalancer) normalizeListenerRoutes(pool func(string) *Pool) error {
	pools := map[string]bool{}
	for i := range lb.Listeners {
		l := &lb.Listeners[i]
		switch l.Protocol {
		case TCP, UDP:
			switch {
			case pools[l.Pool.Name]:
				return fmt.Errorf("listener %s/%d: pool %s is used by another listener", l.Protocol, l.Port, l.Pool.Name)
			case pool(l.Pool.Name) != nil:
				return fmt.Errorf("listener %s/%d: pool %s is also a shared pool", l.Protocol, l.Port, l.Pool.Name)
			}
			pools[l.Pool.Name] = true
		case TLS:
			l.SNI = canonicalSlice(slices.Clone(l.SNI))
			SortSNI(l.SNI)
			for j, r := range l.SNI {
				switch {
				case !validHost(r.Host):
					return fmt.Errorf("listener TLS/%d: SNI host %q is not a host name or a *. wildcard", l.Port, r.Host)
				case j > 0 && l.SNI[j-1].Host == r.Host:
					return fmt.Errorf("listener TLS/%d: SNI host %q given twice", l.Port, r.Host)
				case r.Pool == "":
					return fmt.Errorf("listener TLS/%d: SNI host %q has no pool", l.Port, r.Host)
				case pool(r.Pool) == nil:
					return fmt.Errorf("listener TLS/%d: SNI host %q: pool %s is not one of the pools", l.Port, r.Host, r.Pool)
				case pool(r.Pool).InvalidWeight != 0:
					return fmt.Errorf("listener TLS/%d: SNI host %q: pool %s has an invalid share: a TLS connection cannot be answered 500",
						l.Port, r.Host, r.Pool)
				case pool(r.Pool).Policy.httpOnly():
					return fmt.Errorf("listener TLS/%d: SNI host %q: pool %s has a policy for HTTP only (cookie or header persistence or hash, timeouts, retries, backend TLS)",
						l.Port, r.Host, r.Pool)
				}
			}
		}
	}
	return nil
}

// SortSNI sorts SNI routes by precedence, most specific first: exact host
// names, then wildcards, then the route for every name (empty host); the
// longer host before the shorter within each, then by name. A load
// balancer that takes the first route whose host matches then gives each
// connection the most specific route, as Gateway API prescribes.
func SortSNI(routes []SNIRoute) {
	slices.SortFunc(routes, func(a, b SNIRoute) int {
		return cmp.Or(compareHosts(a.Host, b.Host), cmp.Compare(a.Pool, b.Pool))
	})
}

// SortHostnames sorts listener hostnames by precedence, as SortSNI sorts
// routes: the first that matches a name is the most specific.
func SortHostnames(hosts []string) { slices.SortFunc(hosts, compareHosts) }

// compareHosts orders hosts most specific first: names, wildcards, the
// empty host (every name); the longer before the shorter, then by name.
func compareHosts(a, b string) int {
	return cmp.Or(cmp.Compare(hostClass(a), hostClass(b)), cmp.Compare(len(b), len(a)), cmp.Compare(a, b))
}

// normalizeTLS checks the certificates of an L7 load balancer whose HTTP,
// HTTPS and TLS listeners are ports (port -> protocol): each HTTPS listener
// and each terminating TLS listener has at least one, and each serves such
// listeners only. A certificate without Ports serves them all.
func (lb *LoadBalancer) normalizeTLS(ports map[int32]Protocol) error {
	terminates := map[int32]bool{}
	for _, l := range lb.Listeners {
		if l.Protocol == HTTPS || l.Protocol == TLS && l.Terminate {
			terminates[l.Port] = true
		}
	}
	slices.SortFunc(lb.HTTP.TLS, func(a, b TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
	served := map[int32]bool{}
	for i, c := range lb.HTTP.TLS {
		switch {
		case c.Secret == "":
			return errors.New("a TLS certificate has no Secret")
		case !validObjectRef(c.Secret):
			return fmt.Errorf("TLS Secret %q is not namespace/name of Kubernetes names", c.Secret)
		case i > 0 && lb.HTTP.TLS[i-1].Secret == c.Secret:
			return fmt.Errorf("TLS Secret %s: given twice", c.Secret)
		case len(c.CertPEM) == 0 || len(c.KeyPEM) == 0:
			return fmt.Errorf("TLS Secret %s: no certificate or key", c.Secret)
		case c.Fingerprint == "":
			return fmt.Errorf("TLS Secret %s: no PEM certificate and no fingerprint", c.Secret)
		case c.Fingerprint != CertFingerprint(c.CertPEM):
			return fmt.Errorf("TLS Secret %s: the fingerprint is not the certificate's", c.Secret)
		}
		c.Hosts = canonicalSlice(c.Hosts)
		slices.Sort(c.Hosts)
		var err error
		if c.Ports, err = normalizePorts(c.Ports, func(p int32) error {
			if !terminates[p] {
				return fmt.Errorf("port %d is not an HTTPS listener nor a terminating TLS listener", p)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("TLS Secret %s: %w", c.Secret, err)
		}
		lb.HTTP.TLS[i] = c
		for p := range terminates {
			if len(c.Ports) == 0 || slices.Contains(c.Ports, p) {
				served[p] = true
			}
		}
	}
	if len(lb.HTTP.TLS) == 0 && slices.Contains(slices.Collect(maps.Values(ports)), HTTPS) {
		return errors.New("an HTTPS listener without TLS certificates")
	}
	if len(lb.HTTP.TLS) > 0 && len(terminates) == 0 {
		return errors.New("TLS certificates without an HTTPS listener or a terminating TLS listener")
	}
	for _, l := range lb.Listeners {
		if terminates[l.Port] && (l.Protocol == HTTPS || l.Protocol == TLS) && !served[l.Port] {
			return fmt.Errorf("listener %s/%d: no TLS certificate serves it", l.Protocol, l.Port)
		}
	}
	return nil
}

// normalizePorts sorts ports, refuses duplicates and the ports check
// refuses, and returns nil for none.
func normalizePorts(ports []int32, check func(int32) error) ([]int32, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	ports = slices.Clone(ports)
	slices.Sort(ports)
	for i, p := range ports {
		if i > 0 && ports[i-1] == p {
			return nil, fmt.Errorf("port %d given twice", p)
		}
		if err := check(p); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// Redirect status codes a Redirect may have.
var redirectCodes = []int32{301, 302, 303, 307, 308}

// ValidRedirectStatus reports whether a Redirect may answer with code: the
// rule Normalize applies, for builders that check one route at a time so
// that an invalid route does not refuse its neighbours.
func ValidRedirectStatus(code int32) bool { return slices.Contains(redirectCodes, code) }

// Path modifier types.
const (
	// ReplaceFullPath replaces the whole path of the request.
	ReplaceFullPath = "ReplaceFullPath"
	// ReplacePrefixMatch replaces the part of the path a Prefix rule
	// matched.
	ReplacePrefixMatch = "ReplacePrefixMatch"
)

// CheckRule returns the error Normalize refuses the model that holds only
// rule r of a Gateway's load balancer and its pools with (RuleModel), nil
// when it accepts it: lbsync/gateway leaves out the route of a rule that
// would make the whole model invalid, so that its neighbours are still
// served.
func CheckRule(r Rule, pools ...*Pool) error {
	var invalid *InvalidModelError
	if _, err := Normalize(RuleModel(r, pools...)); errors.As(err, &invalid) {
		return invalid.Err
	} else if err != nil {
		return err
	}
	return nil
}

// normalize checks a rule of an L7 load balancer with listener ports and
// pools (hasPool) and puts it in canonical form: slices sorted (header
// names case-insensitively), empty slices and filters nil, member-less
// parts dropped.
func (r *Rule) normalize(ports map[int32]Protocol, hasPool func(string) bool) error {
	switch r.PathType {
	case PathExact, PathPrefix:
		switch {
		case !strings.HasPrefix(r.Path, "/"):
			return errors.New("the path does not start with /")
		case r.PathType == PathPrefix && r.Path != "/" && strings.HasSuffix(r.Path, "/"):
			return errors.New("a Prefix path other than / has no trailing /")
		}
	case PathRegex:
		if err := CheckRegex(r.Path); err != nil {
			return fmt.Errorf("the path: %w", err)
		}
	default:
		return fmt.Errorf("path type %q is not Exact, Prefix or RegularExpression", r.PathType)
	}
	if err := printable("the path", r.Path); err != nil {
		return err
	}
	if !validHost(r.Host) {
		return fmt.Errorf("%q is not a host name or a *. wildcard", r.Host)
	}
	answers := 0
	for _, set := range []bool{r.Pool != "", r.Redirect != nil, r.FixedStatus != 0, r.Backends != nil} {
		if set {
			answers++
		}
	}
	switch {
	case answers != 1:
		return errors.New("a rule has exactly one of a pool, a redirect and a fixed status (or backends instead of its pool)")
	case r.Pool != "" && !hasPool(r.Pool):
		return fmt.Errorf("pool %s is not one of the pools", r.Pool)
	case r.FixedStatus != 0 && (r.FixedStatus < 200 || r.FixedStatus > 599):
		return fmt.Errorf("fixed status %d is out of 200-599", r.FixedStatus)
	case r.Pool == "" && r.Backends == nil && (r.Rewrite != nil || r.RequestHeaders != nil):
		return errors.New("a rewrite or request header filter needs a pool to send the request to")
	}
	var err error
	if r.Backends, err = normalizeRuleBackends(r.Backends, hasPool); err != nil {
		return err
	}
	if r.Ports, err = normalizePorts(r.Ports, func(p int32) error {
		if ports[p] != HTTP && ports[p] != HTTPS {
			return fmt.Errorf("port %d is not an HTTP or HTTPS listener", p)
		}
		return nil
	}); err != nil {
		return err
	}
	if r.Method != "" && !isToken(r.Method) {
		return fmt.Errorf("method %q is not a token", r.Method)
	}
	if r.Headers, err = normalizeMatches("header", r.Headers, strings.ToLower); err != nil {
		return err
	}
	if r.Query, err = normalizeMatches("query parameter", r.Query, func(s string) string { return s }); err != nil {
		return err
	}
	if r.RequestHeaders, err = normalizeFilter("request", r.RequestHeaders); err != nil {
		return err
	}
	if r.ResponseHeaders, err = normalizeFilter("response", r.ResponseHeaders); err != nil {
		return err
	}
	if r.CORS, err = normalizeCORS(r.CORS); err != nil {
		return err
	}
	if d := r.Redirect; d != nil {
		d := *d
		switch {
		case !ValidRedirectStatus(d.StatusCode):
			return fmt.Errorf("redirect status %d is not 301, 302, 303, 307 or 308", d.StatusCode)
		case d.Scheme != "" && d.Scheme != "http" && d.Scheme != "https":
			return fmt.Errorf("redirect scheme %q is not http or https", d.Scheme)
		case d.Hostname != "" && (!validHost(d.Hostname) || strings.HasPrefix(d.Hostname, "*")):
			return fmt.Errorf("redirect hostname %q is not a host name", d.Hostname)
		case d.Port != 0 && !validPort(d.Port):
			return fmt.Errorf("redirect port %d is out of 1-65535", d.Port)
		}
		if d.Path, err = r.normalizePathModifier("redirect", d.Path); err != nil {
			return err
		}
		r.Redirect = &d
	}
	if w := r.Rewrite; w != nil {
		w := *w
		if w.Hostname != "" && (!validHost(w.Hostname) || strings.HasPrefix(w.Hostname, "*")) {
			return fmt.Errorf("rewrite hostname %q is not a host name", w.Hostname)
		}
		if w.Path, err = r.normalizePathModifier("rewrite", w.Path); err != nil {
			return err
		}
		r.Rewrite = &w
		if w == (Rewrite{}) {
			r.Rewrite = nil
		}
	}
	return nil
}

// normalizeRuleBackends checks the backends of a rule (Rule.Backends) and
// returns a copy of them, nil for none: 1-MaxRuleBackends of them, at
// least one with a pool, each pool one of the pools (hasPool) and named
// once, each weight 1-1000000, header filters valid.
func normalizeRuleBackends(bs []RuleBackend, hasPool func(string) bool) ([]RuleBackend, error) {
	if bs == nil {
		return nil, nil
	}
	if len(bs) == 0 || len(bs) > MaxRuleBackends {
		return nil, fmt.Errorf("%d backends: a rule splits its requests between 1-%d", len(bs), MaxRuleBackends)
	}
	out := make([]RuleBackend, len(bs))
	pools := map[string]bool{}
	for i, b := range bs {
		switch {
		case b.Weight < 1 || b.Weight > 1000000:
			return nil, fmt.Errorf("backend %d: weight %d is out of 1-1000000", i, b.Weight)
		case b.Pool != "" && !hasPool(b.Pool):
			return nil, fmt.Errorf("backend %d: pool %s is not one of the pools", i, b.Pool)
		case b.Pool != "" && pools[b.Pool]:
			return nil, fmt.Errorf("backend %d: pool %s is another backend's", i, b.Pool)
		case b.Pool == "" && b.RequestHeaders != nil:
			return nil, fmt.Errorf("backend %d: a request header filter needs a pool to send the request to", i)
		}
		if b.Pool != "" {
			pools[b.Pool] = true
		}
		f, err := normalizeFilter(fmt.Sprintf("backend %d request", i), b.RequestHeaders)
		if err != nil {
			return nil, err
		}
		out[i] = RuleBackend{Pool: b.Pool, Weight: b.Weight, RequestHeaders: f}
	}
	if len(pools) == 0 {
		return nil, errors.New("backends: none has a pool (a fixed status 500 answers for invalid backendRefs alone)")
	}
	return out, nil
}

// normalizePathModifier checks the path modifier of a redirect or a
// rewrite of r (what says which) and returns a copy of it.
func (r *Rule) normalizePathModifier(what string, m *PathModifier) (*PathModifier, error) {
	if m == nil {
		return nil, nil
	}
	c := *m
	switch c.Type {
	case ReplaceFullPath:
		if !strings.HasPrefix(c.Value, "/") {
			return nil, fmt.Errorf("%s path %q does not start with /", what, c.Value)
		}
	case ReplacePrefixMatch:
		if r.PathType != PathPrefix {
			return nil, fmt.Errorf("%s: ReplacePrefixMatch needs a Prefix path", what)
		}
		if c.Value != "" && !strings.HasPrefix(c.Value, "/") {
			return nil, fmt.Errorf("%s prefix %q is neither empty nor starts with /", what, c.Value)
		}
	default:
		return nil, fmt.Errorf("%s path modifier type %q is not %s or %s", what, c.Type, ReplaceFullPath, ReplacePrefixMatch)
	}
	if err := printable(what+" path", c.Value); err != nil {
		return nil, err
	}
	return &c, nil
}

// normalizeMatches checks header or query parameter matches (what says
// which): names are tokens, given once (compared as fold makes them),
// regular expressions compile, values printable. It returns them sorted by
// name, nil for none.
func normalizeMatches(what string, ms []ValueMatch, fold func(string) string) ([]ValueMatch, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b ValueMatch) int {
		return cmp.Or(cmp.Compare(fold(a.Name), fold(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	for i, m := range ms {
		switch {
		case !isToken(m.Name):
			return nil, fmt.Errorf("%s name %q is not a token", what, m.Name)
		case i > 0 && fold(ms[i-1].Name) == fold(m.Name):
			return nil, fmt.Errorf("%s %s: matched twice", what, m.Name)
		}
		if err := printable(what+" "+m.Name, m.Value); err != nil {
			return nil, err
		}
		if m.Regex {
			if err := CheckRegex(m.Value); err != nil {
				return nil, fmt.Errorf("%s %s: %w", what, m.Name, err)
			}
		}
	}
	return ms, nil
}

// normalizeFilter checks a header filter of the request or the response
// (what says which) and returns a canonical copy, nil when it changes
// nothing. A header is named once across Set, Add and Remove.
func normalizeFilter(what string, f *HeaderFilter) (*HeaderFilter, error) {
	if f == nil {
		return nil, nil
	}
	out := HeaderFilter{Set: canonicalSlice(slices.Clone(f.Set)), Add: canonicalSlice(slices.Clone(f.Add)),
		Remove: canonicalSlice(slices.Clone(f.Remove))}
	seen := map[string]bool{}
	name := func(n string) error {
		switch {
		case !isToken(n):
			return fmt.Errorf("%s header filter: header name %q is not a token", what, n)
		case seen[strings.ToLower(n)]:
			return fmt.Errorf("%s header filter: header %s named twice", what, n)
		}
		seen[strings.ToLower(n)] = true
		return nil
	}
	byName := func(a, b Header) int {
		return cmp.Or(cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)), cmp.Compare(a.Name, b.Name))
	}
	for _, hs := range [][]Header{out.Set, out.Add} {
		slices.SortFunc(hs, byName)
		for _, h := range hs {
			if err := name(h.Name); err != nil {
				return nil, err
			}
			if err := printable(what+" header "+h.Name, h.Value); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(out.Remove, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.ToLower(a), strings.ToLower(b)), cmp.Compare(a, b))
	})
	for _, n := range out.Remove {
		if err := name(n); err != nil {
			return nil, err
		}
	}
	if out.Set == nil && out.Add == nil && out.Remove == nil {
		return nil, nil
	}
	return &out, nil
}

// canonicalSlice returns nil for an empty slice.
func canonicalSlice[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// isToken reports whether s is an HTTP token (RFC 9110): a header name, a
// method.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

// nameRE is what a name of a load balancer object may hold: letters,
// digits, ".", "_" and "-", the names of lbmodel's naming.go (and Shorten's).
// Every provider and HAProxy take such a name as one word, unquoted, and
// none of them ends a line, a word, a Tcl word or a URL's path segment.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// checkName refuses a name (what says which) a load balancer would have to
// quote: the model's names are rendered as they are.
func checkName(what, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s %q holds a character other than letters, digits, '.', '_' and '-'", what, name)
	}
	return nil
}

// objectRefRE matches "namespace/name" of Kubernetes names (DNS labels and
// subdomains: lower-case letters, digits, "-" and ".").
var objectRefRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// validObjectRef reports whether s is "namespace/name" of a Kubernetes
// object: the owners a model records (Service, Ingress, Gateway) and its
// Secrets, which providers write into descriptions and markers.
func validObjectRef(s string) bool { return objectRefRE.MatchString(s) }

// printable refuses a value with control characters (other than a tab):
// no request or configuration line can hold them.
func printable(what, v string) error {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("%s %q holds a control character", what, v)
		}
	}
	return nil
}

// normalizePool checks pool p and sets its members canonical and sorted,
// never nil. Its invalid share (InvalidWeight) is in the range of member
// weights, and only the pools of a Gateway's HTTP rules (httpShare) have
// one. Only the pools of HTTP rules (http) have a policy for HTTP.
func normalizePool(p *Pool, httpShare, http bool) error {
	switch {
	case p.InvalidWeight != 0 && !httpShare:
		return fmt.Errorf("pool %s: invalid weight %d: only a pool of a Gateway's HTTP rules answers a share of its requests 500", p.Name, p.InvalidWeight)
	case p.InvalidWeight < 0 || p.InvalidWeight > maxWeight:
		return fmt.Errorf("pool %s: invalid weight %d out of 0-%d", p.Name, p.InvalidWeight, maxWeight)
	}
	members, err := normalizeMembers(*p)
	if err != nil {
		return err
	}
	p.Members = members
	p.Policy, err = normalizePolicy(p.Name, p.Policy, http)
	return err
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
		if m.Weight < 0 || m.Weight > maxWeight {
			return nil, fmt.Errorf("pool %s: member %s:%d: weight %d out of 0-%d", pool.Name, m.IP, m.Port, m.Weight, maxWeight)
		}
		pool.Members[i].IP = ip
		if m.Weight == 1 {
			pool.Members[i].Weight = 0 // the same
		}
	}
	if pool.Members == nil {
		return []Member{}, nil
	}
	return SortMembers(pool.Members), nil
}

// maxWeight is the largest weight of a member.
const maxWeight = 256

func validPort(p int32) bool { return p >= 1 && p <= 65535 }

// UsableVIP returns why no load balancer may serve on a: the unspecified
// address (HAProxy binds it as every address of the host), loopback,
// link-local and multicast addresses, and IPv4's limited broadcast; nil
// when it may. Normalize refuses a model that requests such a VIP, and
// npl-edge a request to serve one.
func UsableVIP(a netip.Addr) error {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return errors.New("not an IP address")
	case a.IsUnspecified():
		return fmt.Errorf("%s is the unspecified address", a)
	case a.IsLoopback():
		return fmt.Errorf("%s is a loopback address", a)
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return fmt.Errorf("%s is a link-local address", a)
	case a.IsMulticast():
		return fmt.Errorf("%s is a multicast address", a)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is the broadcast address", a)
	}
	return nil
}

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
		out.Listeners[i].Pool.Policy = out.Listeners[i].Pool.Policy.clone()
		out.Listeners[i].SNI = slices.Clone(out.Listeners[i].SNI)
		if v := out.Listeners[i].ClientValidation; v != nil {
			c := *v
			out.Listeners[i].ClientValidation = &c
		}
		out.Listeners[i].Hostnames = slices.Clone(out.Listeners[i].Hostnames)
	}
	out.Pools = slices.Clone(lb.Pools)
	for i := range out.Pools {
		out.Pools[i].Members = slices.Clone(out.Pools[i].Members)
		out.Pools[i].Policy = out.Pools[i].Policy.clone()
	}
	if lb.HTTP != nil {
		h := *lb.HTTP
		h.Rules = slices.Clone(h.Rules)
		for i := range h.Rules {
			h.Rules[i] = h.Rules[i].Clone()
		}
		h.TLS = slices.Clone(h.TLS)
		for i := range h.TLS {
			h.TLS[i].Hosts = slices.Clone(h.TLS[i].Hosts)
			h.TLS[i].Ports = slices.Clone(h.TLS[i].Ports)
			h.TLS[i].CertPEM = slices.Clone(h.TLS[i].CertPEM)
			h.TLS[i].KeyPEM = slices.Clone(h.TLS[i].KeyPEM)
		}
		out.HTTP = &h
	}
	return &out
}

// Clone returns a deep copy of r; nil slices and pointers stay nil.
func (r Rule) Clone() Rule {
	r.Ports = slices.Clone(r.Ports)
	r.Headers = slices.Clone(r.Headers)
	r.Query = slices.Clone(r.Query)
	r.RequestHeaders = r.RequestHeaders.clone()
	r.ResponseHeaders = r.ResponseHeaders.clone()
	r.CORS = r.CORS.clone()
	r.Backends = slices.Clone(r.Backends)
	for i := range r.Backends {
		r.Backends[i].RequestHeaders = r.Backends[i].RequestHeaders.clone()
	}
	if r.Redirect != nil {
		d := *r.Redirect
		if d.Path != nil {
			m := *d.Path
			d.Path = &m
		}
		r.Redirect = &d
	}
	if r.Rewrite != nil {
		w := *r.Rewrite
		if w.Path != nil {
			m := *w.Path
			w.Path = &m
		}
		r.Rewrite = &w
	}
	return r
}

func (f *HeaderFilter) clone() *HeaderFilter {
	if f == nil {
		return nil
	}
	return &HeaderFilter{Set: slices.Clone(f.Set), Add: slices.Clone(f.Add), Remove: slices.Clone(f.Remove)}
}

// checkClientValidation checks the client certificate validation of
// listener l of L7 load balancer lb: only a Gateway's HTTPS listeners have
// one (Gateway API's spec.tls.frontend), and its CA certificates hold at
// least one PEM certificate.
func (lb *LoadBalancer) checkClientValidation(l *Listener) error {
	v := l.ClientValidation
	switch {
	case v == nil:
		return nil
	case l.Protocol != HTTPS || lb.Gateway == "":
		return fmt.Errorf("listener %s/%d: only an HTTPS listener of a Gateway verifies client certificates", l.Protocol, l.Port)
	case !holdsCertificate(v.CACertPEM):
		return fmt.Errorf("listener %s/%d: client validation: the CA certificates hold no PEM certificate", l.Protocol, l.Port)
	}
	return nil
}

// normalizeHostnames checks and sorts the hostnames of listener l of L7
// load balancer lb: only a Gateway's HTTPS listeners have them, valid
// hosts (lower case), two or more once each.
func (lb *LoadBalancer) normalizeHostnames(l *Listener) error {
	if len(l.Hostnames) == 0 {
		return nil
	}
	if l.Protocol != HTTPS || lb.Gateway == "" {
		return fmt.Errorf("listener %s/%d: only an HTTPS listener of a Gateway has hostnames", l.Protocol, l.Port)
	}
	for _, h := range l.Hostnames {
		if !validHost(h) || h != strings.ToLower(h) {
			return fmt.Errorf("listener %s/%d: hostname %q is not a lower-case host name or wildcard", l.Protocol, l.Port, h)
		}
	}
	SortHostnames(l.Hostnames)
	l.Hostnames = slices.Compact(l.Hostnames)
	if len(l.Hostnames) < 2 {
		return fmt.Errorf("listener %s/%d: hostnames: fewer than two", l.Protocol, l.Port)
	}
	return nil
}
