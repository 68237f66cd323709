package avi

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/vmware/alb-sdk/go/models"
)

// A Gateway's load balancer (lbmodel.LoadBalancer.Gateway set) is laid
// out as an Ingress's (one VsVip, HTTP policy set and virtual service),
// with these differences, all described in docs/avi.md:
//
//   - every model pool is a PoolGroup of the same name; its members are
//     pools holding the model members of one weight each (the weight-1
//     members in the pool of the model pool's name, weight w in
//     <pool>-w<w>), with ratio weight × enabled members, so that each
//     enabled member gets its weight's share of requests;
//   - request rules also match listener ports (vs_port), the method and
//     headers (exact), and act: header modifiers (hdr_action), rewrites
//     (rewrite_url_action), redirects (redirect_action) and fixed answers
//     (switching_action HTTP_SWITCHING_SELECT_LOCAL);
//   - its TCP and UDP listeners are an L4 virtual service <lb>-L4 on the
//     same VsVip, with an L4PolicySet whose rule per listener selects the
//     pool group of the listener's pool (weights as above); a Gateway
//     without HTTP and HTTPS listeners has no HTTP policy set nor HTTP
//     virtual service;
//   - a last request rule answers 404 to what no rule matches (when the
//     model has no default pool);
//   - every object carries the gateway marker.
//
// What Avi cannot express exactly is refused by gatewaySubset.

// poolGroupSpec is the part of a PoolGroup the provider decides.
type poolGroupSpec struct {
	Name    string     `json:"name"`
	Cloud   string     `json:"cloud"`
	Members []pgMember `json:"members"`
	Markers markers    `json:"markers"`
}

// pgMember is a pool of a PoolGroup and its ratio.
type pgMember struct {
	Pool  string `json:"pool"`
	Ratio int32  `json:"ratio"`
}

// maxRatio is the largest ratio of a PoolGroup member.
const maxRatio = 1000

var poolGroupKind = objKind[models.PoolGroup]{
	typ:   "poolgroup",
	meta:  func(o *models.PoolGroup) (**string, **string) { return &o.UUID, &o.LastModified },
	owner: func(o *models.PoolGroup) string { return deref(o.CreatedBy) },
}

// The Avi values a Gateway's rules use.
var (
	// aviMethods are the methods a MethodMatch knows.
	aviMethods = []string{"GET", "HEAD", "PUT", "DELETE", "POST", "OPTIONS", "TRACE", "CONNECT", "PATCH",
		"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"}
	// redirectCodes are the status codes of an HTTPRedirectAction.
	redirectCodes = map[int32]string{301: "HTTP_REDIRECT_STATUS_CODE_301", 302: "HTTP_REDIRECT_STATUS_CODE_302",
		307: "HTTP_REDIRECT_STATUS_CODE_307"}
	// localCodes are the status codes a local response answers with.
	localCodes = map[int32]string{200: "HTTP_LOCAL_RESPONSE_STATUS_CODE_200", 204: "HTTP_LOCAL_RESPONSE_STATUS_CODE_204",
		403: "HTTP_LOCAL_RESPONSE_STATUS_CODE_403", 404: "HTTP_LOCAL_RESPONSE_STATUS_CODE_404",
		429: "HTTP_LOCAL_RESPONSE_STATUS_CODE_429", 501: "HTTP_LOCAL_RESPONSE_STATUS_CODE_501"}
)

// The header actions of a rule.
const (
	hdrReplace = "HTTP_REPLACE_HDR"
	hdrAdd     = "HTTP_ADD_HDR"
	hdrRemove  = "HTTP_REMOVE_HDR"
)

// maxPoolServers is the most servers an Avi pool holds (swagger/Pool.json,
// servers: "Maximum of 5000 items allowed"); the provider's tests check it
// against the schema.
const maxPoolServers = 5000

// supported returns an ErrUnsupported error naming the first part of lb
// that the provider's layout cannot express exactly: a pool of more
// members than an Avi pool holds, then lbmodel.IngressSubset for every
// load balancer but a Gateway's, gatewaySubset for a Gateway's.
func supported(lb *lbmodel.LoadBalancer) error {
	pools := slices.Clone(lb.Pools)
	for _, l := range lb.Listeners {
		pools = append(pools, l.Pool)
	}
	for _, p := range pools {
		if n := len(p.Members); n > maxPoolServers {
			return fmt.Errorf("pool %s: %d members, an Avi pool holds at most %d servers: %w", p.Name, n, maxPoolServers, lbmodel.ErrUnsupported)
		}
	}
	if lb.Gateway == "" || !lb.IsL7() {
		return lbmodel.IngressSubset(lb)
	}
	return gatewaySubset(lb)
}

// gatewaySubset refuses, naming the rule and field, what of a Gateway's
// load balancer Avi cannot express exactly: TLS listeners (they would need
// SNI child virtual services), h2c pools, certificates for some HTTPS listeners only (a virtual service
// serves its certificates on every SSL port), RegularExpression paths and
// header matches (they need StringGroups), query matches (Avi's only query
// test is "contains"), methods Avi does not know, response header
// modifiers, ReplacePrefixMatch paths and redirects to the path "/" (a
// redirect or rewrite path is one constant), redirect status codes other
// than 301, 302 and 307, fixed answers other than 200, 204, 403, 404, 429
// and 501, redirects whose scheme is kept on rules without ports, weights
// whose pool group would need a ratio above 1000, and pools that answer
// the share of invalid backends 500 (Pool.InvalidWeight).
func gatewaySubset(lb *lbmodel.LoadBalancer) error {
	if lb.HTTP == nil {
		return fmt.Errorf("a Gateway's load balancer without HTTP routes: %w", lbmodel.ErrUnsupported)
	}
	var https []int32
	for _, l := range lb.Listeners {
		switch l.Protocol {
		case lbmodel.HTTP, lbmodel.TCP, lbmodel.UDP:
		case lbmodel.HTTPS:
			https = append(https, l.Port)
		default:
			return fmt.Errorf("listener %s/%d: a %s listener of a Gateway is %w", l.Protocol, l.Port, l.Protocol, lbmodel.ErrUnsupported)
		}
	}
	slices.Sort(https)
	// An SSL profile verifies no client certificate against a Gateway's
	// CA ConfigMap here: the listener is refused, never served without it.
	if err := lbmodel.ClientValidationUnsupported(lb); err != nil {
		return err
	}
	pools := slices.Clone(lb.Pools)
	for _, l := range lb.Listeners {
		if l.Protocol == lbmodel.TCP || l.Protocol == lbmodel.UDP {
			pools = append(pools, l.Pool)
		}
	}
	for _, p := range pools {
		if p.AppProtocol != "" {
			return fmt.Errorf("pool %s: appProtocol %s is %w", p.Name, p.AppProtocol, lbmodel.ErrUnsupported)
		}
		if _, err := splitPool(p); err != nil {
			return err
		}
	}
	for _, c := range lb.HTTP.TLS {
		if len(c.Ports) > 0 && !slices.Equal(c.Ports, https) {
			return fmt.Errorf("TLS Secret %s: ports %v: a certificate for some HTTPS listeners only is %w", c.Secret, c.Ports, lbmodel.ErrUnsupported)
		}
	}
	for _, r := range lb.HTTP.Rules {
		if field := unsupportedField(r); field != "" {
			return lbmodel.UnsupportedRule(r, field)
		}
	}
	// A pool group splits requests between pools of servers only.
	return lbmodel.InvalidShareUnsupported(lb)
}

// unsupportedField names the first field of r a Gateway's layout cannot
// express, or returns "".
func unsupportedField(r lbmodel.Rule) string {
	switch {
	case r.PathType == lbmodel.PathRegex:
		return "pathType RegularExpression"
	case r.Method != "" && !slices.Contains(aviMethods, r.Method):
		return fmt.Sprintf("method %s (not one Avi matches)", r.Method)
	case slices.ContainsFunc(r.Headers, func(m lbmodel.ValueMatch) bool { return m.Regex }):
		return "a RegularExpression header match"
	case len(r.Query) > 0:
		return "query (Avi matches a query only by substring)"
	case r.ResponseHeaders != nil:
		return "responseHeaders"
	case r.Backends != nil:
		return "backends (a pool group changes no request per pool)"
	case r.CORS != nil:
		return "cors (the layout answers no preflight request)"
	case r.FixedStatus != 0 && localCodes[r.FixedStatus] == "":
		return fmt.Sprintf("fixedStatus %d (Avi answers 200, 204, 403, 404, 429 or 501)", r.FixedStatus)
	}
	if w := r.Rewrite; w != nil && w.Path != nil {
		if w.Path.Type != lbmodel.ReplaceFullPath {
			return "rewrite path " + w.Path.Type
		}
		if w.Path.Value == "/" {
			return `rewrite to the path "/"`
		}
	}
	if d := r.Redirect; d != nil {
		switch {
		case redirectCodes[d.StatusCode] == "":
			return fmt.Sprintf("redirect statusCode %d (Avi redirects with 301, 302 or 307)", d.StatusCode)
		case d.Path != nil && d.Path.Type != lbmodel.ReplaceFullPath:
			return "redirect path " + d.Path.Type
		case d.Path != nil && d.Path.Value == "/":
			return `redirect to the path "/"`
		case d.Scheme == "" && len(r.Ports) == 0:
			return "a redirect keeping the scheme on a rule without ports"
		}
	}
	return ""
}

// subPool is one pool of a pool group: the members of one weight.
type subPool struct {
	name    string // the Avi name
	weight  int32
	members []lbmodel.Member
	ratio   int32
}

// splitPool splits a model pool into pools of one weight each, sorted by
// name, with their pool group ratios: weight × enabled members, divided
// by their greatest common divisor when one is above maxRatio. The pool
// of weight 1 (the model pool's name) always exists, so that a pool group
// never is empty.
func splitPool(p lbmodel.Pool) ([]subPool, error) {
	byWeight := map[int32][]lbmodel.Member{1: {}}
	for _, m := range p.Members {
		w := max(m.Weight, 1)
		m.Weight = 0
		byWeight[w] = append(byWeight[w], m)
	}
	out := make([]subPool, 0, len(byWeight))
	most, g := int32(0), int32(0)
	for w, ms := range byWeight {
		name := p.Name
		if w != 1 {
			name = fmt.Sprintf("%s-w%d", p.Name, w)
		}
		enabled := int32(0)
		for _, m := range ms {
			if m.Enabled {
				enabled++
			}
		}
		sp := subPool{name: lbmodel.Shorten(name, maxNameLength), weight: w, members: ms, ratio: w * enabled}
		most, g = max(most, sp.ratio), lbmodel.WeightGCD(g, sp.ratio)
		out = append(out, sp)
	}
	if most > maxRatio {
		if most/g > maxRatio {
			return nil, fmt.Errorf("pool %s: its weights need a PoolGroup ratio of %d, above Avi's %d: %w",
				p.Name, most/g, maxRatio, lbmodel.ErrUnsupported)
		}
		for i := range out {
			out[i].ratio /= g
		}
	}
	slices.SortFunc(out, func(a, b subPool) int { return cmp.Compare(a.name, b.name) })
	return out, nil
}

// planGatewayPools lays out the pools of a Gateway's load balancer as pool
// groups of pools of one weight each. It returns the Avi name of each model
// pool's pool group.
func (p *Provider) planGatewayPools(l *l7Layout, lb *lbmodel.LoadBalancer, mk markers) (map[string]string, error) {
	groups := map[string]string{}
	for _, pl := range lb.Pools {
		name, err := p.planPoolGroup(l, pl, mk, monitorTCP)
		if err != nil {
			return nil, err
		}
		groups[pl.Name] = name
	}
	return groups, nil
}

// planPoolGroup adds the pool group of the model pool pl and its pools of
// one weight each to l, keeping l's pools and groups sorted by name, and
// returns the pool group's Avi name.
func (p *Provider) planPoolGroup(l *l7Layout, pl lbmodel.Pool, mk markers, monitor string) (string, error) {
	subs, err := splitPool(pl)
	if err != nil {
		return "", err
	}
	pmk := mk
	pmk.Name = pl.Name
	group := poolGroupSpec{Name: lbmodel.Shorten(pl.Name, maxNameLength), Cloud: p.cfg.Cloud, Markers: pmk,
		Members: []pgMember{}}
	if slices.ContainsFunc(l.groups, func(g poolGroupSpec) bool { return g.Name == group.Name }) {
		return "", fmt.Errorf("pools %s: two shorten to one name", pl.Name)
	}
	// Every pool of the group takes the model pool's policy.
	var policy poolSpec
	p.poolPolicy(&l.objects, &policy, pl, monitor, len(subs))
	for _, sp := range subs {
		if slices.ContainsFunc(l.pools, func(ps poolSpec) bool { return ps.Name == sp.name }) {
			return "", fmt.Errorf("pools %s: two shorten to one name %s", pl.Name, sp.name)
		}
		smk := pmk
		if sp.weight != 1 {
			smk.Weight = strconv.Itoa(int(sp.weight))
		}
		spec := policy
		spec.Name, spec.Cloud, spec.Members, spec.Markers = sp.name, p.cfg.Cloud, sp.members, smk
		l.pools = append(l.pools, spec)
		group.Members = append(group.Members, pgMember{Pool: sp.name, Ratio: sp.ratio})
	}
	l.groups = append(l.groups, group)
	slices.SortFunc(l.pools, func(a, b poolSpec) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(l.groups, func(a, b poolGroupSpec) int { return cmp.Compare(a.Name, b.Name) })
	return group.Name, nil
}

// noMatchRule is the last request rule of a Gateway's load balancer
// without a default pool: it answers 404 to every request no rule before
// it matched, as Gateway API requires (a virtual service without a pool
// would not).
var noMatchRule = httpRuleSpec{Name: "no-match-404", Path: "/", Prefix: true, Local: localCodes[404]}

// l4Suffix names the L4 virtual service and policy set of a Gateway's TCP
// and UDP listeners: <lb>-L4. Upper case, so no Service's load balancer has
// this name.
const l4Suffix = "-L4"

// gatewayL4 is the L4 virtual service of a Gateway's TCP and UDP listeners,
// beside the HTTP one on the same VsVip.
type gatewayL4 struct {
	name   string
	policy policySpec
	vs     vsSpec
}

// planGatewayL4 lays out the TCP and UDP listeners of a Gateway's load
// balancer, if any, as an L4 virtual service on the load balancer's VsVip:
// each listener's pool a pool group (weights as for HTTP rules), an
// L4PolicySet rule per listener that selects it.
func (p *Provider) planGatewayL4(l *l7Layout, lb *lbmodel.LoadBalancer, mk markers) error {
	var ls []lbmodel.Listener
	for _, ln := range lb.Listeners {
		if ln.Protocol == lbmodel.TCP || ln.Protocol == lbmodel.UDP {
			ls = append(ls, ln)
		}
	}
	if len(ls) == 0 {
		return nil
	}
	name := lbmodel.Shorten(lb.Name+l4Suffix, maxNameLength)
	g := &gatewayL4{name: name, policy: policySpec{Name: name, Markers: mk}, vs: vsSpec{
		Name: name, Cloud: p.cfg.Cloud, ServiceEngineGroup: p.cfg.ServiceEngineGroup, VsVip: l.name, PolicySet: name,
		ApplicationProfile: applicationProfile, NetworkProfile: profileTCPProxy, Markers: mk,
	}}
	allUDP := !slices.ContainsFunc(ls, func(ln lbmodel.Listener) bool { return ln.Protocol != lbmodel.UDP })
	if allUDP {
		g.vs.NetworkProfile = profileUDPFastPath
	}
	for _, ln := range ls {
		monitor := monitorTCP
		if ln.Protocol == lbmodel.UDP {
			monitor = monitorUDP
		}
		group, err := p.planPoolGroup(l, ln.Pool, mk, monitor)
		if err != nil {
			return err
		}
		g.policy.Rules = append(g.policy.Rules, ruleSpec{Port: ln.Port, Protocol: ln.Protocol, PoolGroup: group})
		svc := serviceSpec{Port: ln.Port}
		if ln.Protocol == lbmodel.UDP && !allUDP {
			svc.NetworkProfile = profileUDPFastPath
		}
		g.vs.Services = append(g.vs.Services, svc)
	}
	sortRules(g.policy.Rules)
	sortServices(g.vs.Services)
	l.l4 = g
	return nil
}

// gatewayRules lays out the request rules of one model rule (index i) of
// a Gateway's load balancer: one per path test, and for a redirect that
// keeps the scheme, one per path test and listener port, since Avi's
// redirect names its protocol. The rule names say what the model had that
// the Avi rule does not show: "/o<n>" its Order, "/p<port>" a redirect
// that keeps the listener's scheme, "/d" a redirect port the model left
// to the scheme or listener.
func gatewayRules(i int, r lbmodel.Rule, listeners map[int32]lbmodel.Protocol, group map[string]string) []httpRuleSpec {
	base := httpRuleSpec{Host: r.Host, Ports: r.Ports, Headers: r.Headers, Local: localCodes[r.FixedStatus]}
	if r.Method != "" {
		base.Method = "HTTP_METHOD_" + r.Method
	}
	if r.Pool != "" {
		base.PoolGroup = group[r.Pool]
	}
	if f := r.RequestHeaders; f != nil {
		for _, h := range f.Set {
			base.HdrActions = append(base.HdrActions, hdrActionSpec{Action: hdrReplace, Name: h.Name, Value: h.Value})
		}
		for _, h := range f.Add {
			base.HdrActions = append(base.HdrActions, hdrActionSpec{Action: hdrAdd, Name: h.Name, Value: h.Value})
		}
		for _, n := range f.Remove {
			base.HdrActions = append(base.HdrActions, hdrActionSpec{Action: hdrRemove, Name: n})
		}
	}
	if w := r.Rewrite; w != nil {
		base.Rewrite = &rewriteSpec{Host: w.Hostname}
		if w.Path != nil {
			base.Rewrite.Path = strings.TrimPrefix(w.Path.Value, "/")
		}
	}
	suffix := ""
	if r.Order != 0 {
		suffix = fmt.Sprintf("/o%d", r.Order)
	}
	var out []httpRuleSpec
	for j, m := range r.PathMatches() {
		rs := base
		rs.Name = fmt.Sprintf("rule-%d.%d%s", i, j, suffix)
		rs.Path, rs.Prefix = m.Path, m.Prefix
		d := r.Redirect
		if d == nil {
			out = append(out, rs)
			continue
		}
		redirect := redirectSpec{Host: d.Hostname, Port: d.Port, Status: redirectCodes[d.StatusCode]}
		if d.Path != nil {
			redirect.Path = strings.TrimPrefix(d.Path.Value, "/")
		}
		if d.Scheme != "" {
			redirect.Protocol = strings.ToUpper(d.Scheme)
			if d.Port == 0 {
				redirect.Port = wellKnownPort(redirect.Protocol)
				rs.Name += "/d"
			}
			rs.Redirect = &redirect
			out = append(out, rs)
			continue
		}
		for _, port := range r.Ports {
			split, sr := rs, redirect
			split.Name += fmt.Sprintf("/p%d", port)
			split.Ports = []int32{port}
			sr.Protocol = string(listeners[port])
			if d.Port == 0 {
				sr.Port = port
				split.Name += "/d"
			}
			split.Redirect = &sr
			out = append(out, split)
		}
	}
	return out
}

func wellKnownPort(protocol string) int32 {
	if protocol == "HTTPS" {
		return 443
	}
	return 80
}

// Reading a Gateway's objects back.

func poolGroupSpecOf(o *models.PoolGroup) poolGroupSpec {
	s := poolGroupSpec{Name: deref(o.Name), Cloud: refName(o.CloudRef), Markers: markersOf(o.Markers), Members: []pgMember{}}
	for _, m := range o.Members {
		if m == nil {
			continue
		}
		ratio := int32(1) // the controller's default
		if m.Ratio != nil {
			ratio = *m.Ratio
		}
		s.Members = append(s.Members, pgMember{Pool: refName(m.PoolRef), Ratio: ratio})
	}
	slices.SortFunc(s.Members, func(a, b pgMember) int { return cmp.Compare(a.Pool, b.Pool) })
	return s
}

func (p *Provider) poolGroupModel(s poolGroupSpec, poolURLs map[string]*string) *models.PoolGroup {
	o := &models.PoolGroup{
		Name:             ptr(s.Name),
		CloudRef:         nameRef("cloud", s.Cloud),
		CreatedBy:        ptr(p.owner),
		Markers:          markerLabels(s.Markers),
		CloudConfigCksum: ptr(checksum(s)),
	}
	for _, m := range s.Members {
		o.Members = append(o.Members, &models.PoolGroupMember{PoolRef: objectRef(poolURLs[m.Pool]), Ratio: ptr(m.Ratio)})
	}
	return o
}

// gatewayPools are the model pools of a Gateway's load balancer: one per
// pool group, in the order of groups, with the members of the pools it
// selects, each with the weight its pool is marked with.
func gatewayPools(groups []*models.PoolGroup, pools []*models.Pool) []lbmodel.Pool {
	byName := map[string]*models.Pool{}
	for _, o := range pools {
		byName[deref(o.Name)] = o
	}
	out := []lbmodel.Pool{}
	for _, g := range groups {
		s := poolGroupSpecOf(g)
		pl := lbmodel.Pool{Name: cmp.Or(s.Markers.Name, s.Name), Members: []lbmodel.Member{}}
		first := true
		for _, m := range s.Members {
			o := byName[m.Pool]
			if o == nil {
				continue
			}
			// Every pool of the group has the policy, or the group has none.
			if applied := appliedPolicy(o); first {
				pl.Policy, first = applied, false
			} else if !reflect.DeepEqual(pl.Policy, applied) {
				pl.Policy = nil
			}
			w, _ := strconv.Atoi(markersOf(o.Markers).Weight)
			for _, mb := range membersOf(o) {
				if w > 1 {
					mb.Weight = int32(w)
				}
				pl.Members = append(pl.Members, mb)
			}
		}
		pl.Members = lbmodel.SortMembers(pl.Members)
		out = append(out, pl)
	}
	return out
}

// ruleFlags are what a Gateway rule's name says beside its index.
type ruleFlags struct {
	order        int32
	keepScheme   bool // "/p<port>": a redirect keeping the listener's scheme
	derivedPort  bool // "/d": a redirect port the model left out
	group, index string
}

// parseRuleName reads rule-<i>.<j>[/o<n>][/p<port>][/d].
func parseRuleName(name string) ruleFlags {
	parts := strings.Split(name, "/")
	var f ruleFlags
	f.group, f.index, _ = strings.Cut(strings.TrimPrefix(parts[0], "rule-"), ".")
	if _, err := strconv.Atoi(f.group); err != nil || !strings.HasPrefix(parts[0], "rule-") {
		f.group = name
	}
	for _, part := range parts[1:] {
		switch {
		case part == "d":
			f.derivedPort = true
		case strings.HasPrefix(part, "o"):
			n, _ := strconv.Atoi(part[1:])
			f.order = int32(n)
		case strings.HasPrefix(part, "p"):
			f.keepScheme = true
		}
	}
	return f
}

// gatewayRule fills the Gateway fields of a model rule from the first
// request rule of its group.
func gatewayRule(r *lbmodel.Rule, rs httpRuleSpec, f ruleFlags) {
	r.Method = strings.TrimPrefix(rs.Method, "HTTP_METHOD_")
	r.Headers = rs.Headers
	r.Order = f.order
	for code, v := range localCodes {
		if v == rs.Local && v != "" {
			r.FixedStatus = code
		}
	}
	for _, a := range rs.HdrActions {
		if r.RequestHeaders == nil {
			r.RequestHeaders = &lbmodel.HeaderFilter{}
		}
		switch a.Action {
		case hdrReplace:
			r.RequestHeaders.Set = append(r.RequestHeaders.Set, lbmodel.Header{Name: a.Name, Value: a.Value})
		case hdrAdd:
			r.RequestHeaders.Add = append(r.RequestHeaders.Add, lbmodel.Header{Name: a.Name, Value: a.Value})
		case hdrRemove:
			r.RequestHeaders.Remove = append(r.RequestHeaders.Remove, a.Name)
		}
	}
	if w := rs.Rewrite; w != nil {
		r.Rewrite = &lbmodel.Rewrite{Hostname: w.Host}
		if w.Path != "" {
			r.Rewrite.Path = &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/" + w.Path}
		}
	}
	if d := rs.Redirect; d != nil {
		r.Redirect = &lbmodel.Redirect{Hostname: d.Host, Port: d.Port}
		for code, v := range redirectCodes {
			if v == d.Status {
				r.Redirect.StatusCode = code
			}
		}
		if !f.keepScheme {
			r.Redirect.Scheme = strings.ToLower(d.Protocol)
		}
		if f.derivedPort {
			r.Redirect.Port = 0
		}
		if d.Path != "" {
			r.Redirect.Path = &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/" + d.Path}
		}
	}
}
