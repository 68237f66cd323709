package avi

import (
	"cmp"
	"slices"

	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Assembling L7 load balancers from the objects List read.

// l7Parts are the objects of one L7 load balancer that List found.
type l7Parts struct {
	vs     *models.VirtualService
	policy *models.HTTPPolicySet
	vsvip  *models.VsVip
	pools  []*models.Pool
	certs  []*models.SSLKeyAndCertificate
	groups []*models.PoolGroup
	// l4vs and l4policy are a Gateway's L4 virtual service and policy set.
	l4vs     *models.VirtualService
	l4policy *models.L4PolicySet
}

// groupL7 assembles L7 load balancers from the objects marked with one, and
// returns the objects left for the L4 grouping. A virtual service or L4
// policy set named <lb>-L4 is the L4 part of a Gateway's load balancer.
func (p *Provider) groupL7(vss []*models.VirtualService, policies []*models.HTTPPolicySet, l4Policies []*models.L4PolicySet,
	pools []*models.Pool, groups []*models.PoolGroup, certs []*models.SSLKeyAndCertificate, vsvips []*models.VsVip) (
	out []lbmodel.LoadBalancer, restVSs []*models.VirtualService, restL4Policies []*models.L4PolicySet,
	restPools []*models.Pool, restVsVips []*models.VsVip) {
	byLB := map[string]*l7Parts{}
	get := func(name string) *l7Parts {
		if byLB[name] == nil {
			byLB[name] = &l7Parts{}
		}
		return byLB[name]
	}
	isL4 := func(lb string, name *string) bool {
		return deref(name) == lbmodel.Shorten(lb+l4Suffix, maxNameLength)
	}
	for _, o := range vss {
		switch lb := markersOf(o.Markers).LB; {
		case lb == "":
			restVSs = append(restVSs, o)
		case isL4(lb, o.Name):
			get(lb).l4vs = o
		default:
			get(lb).vs = o
		}
	}
	for _, o := range l4Policies {
		if lb := markersOf(o.Markers).LB; lb != "" && isL4(lb, o.Name) {
			get(lb).l4policy = o
		} else {
			restL4Policies = append(restL4Policies, o)
		}
	}
	for _, o := range policies {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).policy = o
		}
	}
	for _, o := range pools {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).pools = append(get(lb).pools, o)
		} else {
			restPools = append(restPools, o)
		}
	}
	for _, o := range certs {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).certs = append(get(lb).certs, o)
		}
	}
	for _, o := range groups {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).groups = append(get(lb).groups, o)
		}
	}
	for _, o := range vsvips {
		mk := markersOf(o.Markers)
		switch {
		case mk.Cluster != p.cfg.ClusterName:
		case mk.LB != "":
			get(mk.LB).vsvip = o
		default:
			restVsVips = append(restVsVips, o)
		}
	}
	for name, pt := range byLB {
		out = append(out, l7Model(name, pt))
	}
	return out, restVSs, restL4Policies, restPools, restVsVips
}

// l7Model is the load balancer that the objects pt hold.
func l7Model(name string, pt *l7Parts) lbmodel.LoadBalancer {
	lb := lbmodel.LoadBalancer{Name: name, Kind: lbmodel.L7, Listeners: []lbmodel.Listener{},
		VIPs: vipsOf(pt.vsvip), HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}}
	modelPool := map[string]string{} // Avi name of a pool or pool group -> model name
	for _, o := range pt.pools {
		mk := markersOf(o.Markers)
		n := cmp.Or(mk.Name, deref(o.Name))
		modelPool[deref(o.Name)] = n
		lb.Ingress = cmp.Or(lb.Ingress, mk.Ingress)
		lb.Gateway = cmp.Or(lb.Gateway, mk.Gateway)
		if mk.Gateway == "" {
			lb.Pools = append(lb.Pools, lbmodel.Pool{Name: n, Members: membersOf(o), Policy: appliedPolicy(o)})
		}
	}
	for _, o := range pt.groups {
		mk := markersOf(o.Markers)
		modelPool[deref(o.Name)] = cmp.Or(mk.Name, deref(o.Name))
		lb.Gateway = cmp.Or(lb.Gateway, mk.Gateway)
	}
	if len(pt.groups) > 0 {
		// The pool groups the L4 rules select are listener pools.
		byGroup := map[string]lbmodel.Pool{}
		for i, pl := range gatewayPools(pt.groups, pt.pools) {
			byGroup[deref(pt.groups[i].Name)] = pl
		}
		listenerPools := map[string]bool{}
		if pt.l4policy != nil {
			lb.Gateway = cmp.Or(lb.Gateway, markersOf(pt.l4policy.Markers).Gateway)
			for _, r := range rulesOf(pt.l4policy) {
				pl, ok := byGroup[r.PoolGroup]
				if !ok {
					pl = lbmodel.Pool{Name: r.PoolGroup, Members: []lbmodel.Member{}}
				}
				listenerPools[r.PoolGroup] = true
				lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: r.Port, Protocol: r.Protocol, Pool: pl})
			}
		}
		for _, g := range pt.groups {
			if !listenerPools[deref(g.Name)] {
				lb.Pools = append(lb.Pools, byGroup[deref(g.Name)])
			}
		}
	}
	lbmodel.SortPools(lb.Pools)
	poolName := func(avi string) string { return cmp.Or(modelPool[avi], avi) }
	var https []int32
	if pt.vs != nil {
		mk := markersOf(pt.vs.Markers)
		lb.Ingress = cmp.Or(mk.Ingress, lb.Ingress)
		lb.Gateway = cmp.Or(mk.Gateway, lb.Gateway)
		for _, svc := range pt.vs.Services {
			if svc == nil || svc.Port == nil {
				continue
			}
			proto := lbmodel.HTTP
			if svc.EnableSsl != nil && *svc.EnableSsl {
				proto = lbmodel.HTTPS
				https = append(https, *svc.Port)
			}
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: *svc.Port, Protocol: proto})
		}
		slices.Sort(https)
		if d := cmp.Or(refName(pt.vs.PoolRef), refName(pt.vs.PoolGroupRef)); d != "" {
			lb.HTTP.DefaultPool = poolName(d)
		}
	}
	lbmodel.SortListeners(lb.Listeners)
	if pt.l4vs != nil {
		lb.Gateway = cmp.Or(lb.Gateway, markersOf(pt.l4vs.Markers).Gateway)
	}
	if pt.policy != nil {
		lb.HTTP.Rules = rulesFromPolicy(httpRulesOf(pt.policy), poolName)
	}
	for _, o := range pt.certs {
		s := certSpecOf(o)
		c := lbmodel.TLSCert{Secret: s.Markers.Secret, Hosts: s.Markers.Hosts, Fingerprint: s.Fingerprint}
		if lb.Gateway != "" {
			// A virtual service serves its certificates on every SSL port.
			c.Ports = slices.Clone(https)
		}
		lb.HTTP.TLS = append(lb.HTTP.TLS, c)
	}
	slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
	return lb
}

// rulesFromPolicy turns request rules back into model rules: the rules
// rule-<i>.<j>[/...] of one i are the path tests (and, for a redirect that
// keeps the scheme, the listener ports) of one model rule.
func rulesFromPolicy(specs []httpRuleSpec, poolName func(string) string) []lbmodel.Rule {
	type group struct {
		first   httpRuleSpec
		flags   ruleFlags
		indexes []string
		matches []lbmodel.PathMatch
		ports   []int32
		bad     bool
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range specs {
		if r.Name == noMatchRule.Name {
			continue // the answer to what no rule matches, not a model rule
		}
		f := parseRuleName(r.Name)
		g := groups[f.group]
		if g == nil {
			g = &group{first: r, flags: f}
			groups[f.group] = g
			order = append(order, f.group)
		}
		g.bad = g.bad || r.Foreign != ""
		g.ports = append(g.ports, r.Ports...)
		if !slices.Contains(g.indexes, f.index) {
			g.indexes = append(g.indexes, f.index)
			g.matches = append(g.matches, lbmodel.PathMatch{Path: r.Path, Prefix: r.Prefix})
		}
	}
	rules := []lbmodel.Rule{}
	for _, key := range order {
		g := groups[key]
		path, typ, ok := lbmodel.PathOf(g.matches)
		if !ok || g.bad {
			continue // not a rule the provider makes; Ensure rewrites it
		}
		slices.Sort(g.ports)
		r := lbmodel.Rule{Host: g.first.Host, Path: path, PathType: typ, Ports: slices.Compact(g.ports)}
		if pool := cmp.Or(g.first.Pool, g.first.PoolGroup); pool != "" {
			r.Pool = poolName(pool)
		}
		gatewayRule(&r, g.first, g.flags)
		rules = append(rules, r)
	}
	lbmodel.SortRules(rules)
	return rules
}
