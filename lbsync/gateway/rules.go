package gateway

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The rules an attached HTTPRoute or GRPCRoute adds to the model, each
// with the pool of its backendRefs (backends.go); a route with a rule the
// model or the provider refuses is left out whole.

// addRouteRules adds the rules and pools of an HTTPRoute or GRPCRoute,
// unless one of them breaks the model's rules (lbmodel.CheckRule: a
// value the API server let through, such as a control character in a
// match) or the provider refuses it (Input.Checker): then none of the route
// is in the model, and refuseRoute says why in its status. Either would
// otherwise fail the whole model, and the route's neighbours with it.
func (b *build) addRouteRules(at *attachment, lb *lbmodel.LoadBalancer, ls []*listener, res *Result) {
	rules, origins := len(lb.HTTP.Rules), len(b.origins)
	backends := maps.Clone(b.backends)
	if at.route.kind == KindGRPCRoute {
		b.addGRPCRules(at, lb)
	} else {
		b.addRules(at, lb)
	}
	added := lb.HTTP.Rules[rules:]
	for _, r := range added {
		var pool *lbmodel.Pool
		if r.Pool != "" {
			pool = b.pools[r.Pool]
		}
		err := lbmodel.CheckRule(r, pool)
		if err == nil && b.in.Checker != nil {
			err = b.in.Checker.CheckModel(lbmodel.RuleModel(r, pool))
		}
		if err == nil {
			continue
		}
		for _, r := range added {
			delete(b.pools, r.Pool)
		}
		lb.HTTP.Rules, b.origins, b.backends = lb.HTTP.Rules[:rules], b.origins[:origins], backends
		b.refuseRoute(at.route, ls, res, err)
		return
	}
}

// refuseRoute records that a route cannot be served: its accepted
// parentRefs become Accepted False (UnsupportedValue, with the message of
// the check that refused it), and it counts on no listener.
func (b *build) refuseRoute(rt *routeView, ls []*listener, res *Result, err error) {
	b.errorf("%s: %v", rt, err)
	for _, l := range ls {
		delete(l.routes, rt.id())
	}
	i := slices.IndexFunc(res.Routes, func(r RouteResult) bool {
		return r.Kind == rt.kind && r.Namespace == rt.meta.Namespace && r.Name == rt.meta.Name
	})
	if i < 0 {
		return
	}
	for p := range res.Routes[i].Parents {
		conds := res.Routes[i].Parents[p].Conditions
		for c := range conds {
			if conds[c].Type == string(gatewayv1.RouteConditionAccepted) && conds[c].Status == metav1.ConditionTrue {
				conds[c] = b.cond(conds[c].Type, false, string(gatewayv1.RouteReasonUnsupportedValue), err.Error(), rt.meta.Generation)
			}
		}
	}
}

// ruleOrigin orders the rules: the position of the route (oldest first)
// and the rule index, which Build turns into Rule.Order.
type ruleOrigin struct {
	route *routeView
	index int
}

// addRule adds r for each of its hosts and ports, merging the ports of
// rules that are otherwise the same.
func (b *build) addRule(lb *lbmodel.LoadBalancer, r lbmodel.Rule, hosts map[int32][]string, rt *routeView, index int) {
	byHost := map[string][]int32{}
	for port, hs := range hosts {
		for _, h := range hs {
			byHost[h] = append(byHost[h], port)
		}
	}
	for h, ports := range byHost {
		x := r
		x.Host = h
		slices.Sort(ports)
		x.Ports = slices.Compact(ports)
		x.Order = int32(index) // rebased in finish
		lb.HTTP.Rules = append(lb.HTTP.Rules, x)
		b.origins = append(b.origins, ruleOrigin{route: rt, index: index})
	}
}

// rulePool builds the pool of one HTTPRoute or GRPCRoute rule from its
// backendRefs and returns its name; "" when no valid one can serve (the
// rule answers 500).
func (b *build) rulePool(rt *routeView, index int) string {
	name := lbmodel.GatewayRoutePoolName(b.lbName, rt.kind, rt.meta.Namespace, rt.meta.Name, index)
	p := b.backendPool(rt, index, name, corev1.ProtocolTCP)
	if !p.hasBackends {
		return ""
	}
	policy, warnings, _ := rulePolicy(rt, index) // checked by checkRule
	for _, w := range warnings {
		b.warnf("%s: rule %d: %s", rt, index, w)
	}
	p.Policy = policy
	if _, ok := b.pools[name]; !ok {
		b.pools[name] = &p.Pool
	}
	return name
}
