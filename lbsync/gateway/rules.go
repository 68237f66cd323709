package gateway

import (
	"fmt"
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
	rules, origins, pools := len(lb.HTTP.Rules), len(b.origins), len(b.poolOrder)
	backends := maps.Clone(b.backends)
	if at.route.kind == KindGRPCRoute {
		b.addGRPCRules(at, lb)
	} else {
		b.addRules(at, lb)
	}
	added := lb.HTTP.Rules[rules:]
	err := b.checkRules(added)
	if err == nil {
		if err = b.fits(added, b.poolOrder[pools:]); err != nil {
			rt := at.route
			res.RouteEvents = append(res.RouteEvents, RouteEvent{Kind: rt.kind, Namespace: rt.meta.Namespace, Name: rt.meta.Name,
				Reason: ReasonTooLarge, Message: err.Error()})
		}
	}
	if err == nil {
		return
	}
	// Only the pools this route made go: another route's pool of the same
	// name stays.
	for _, name := range b.poolOrder[pools:] {
		delete(b.pools, name)
	}
	lb.HTTP.Rules, b.origins, b.backends, b.poolOrder = lb.HTTP.Rules[:rules], b.origins[:origins], backends, b.poolOrder[:pools]
	b.refuseRoute(at.route, ls, res, err)
}

// checkRules returns why the model or the provider refuses one of rules
// with its pool, nil when neither does.
func (b *build) checkRules(rules []lbmodel.Rule) error {
	for _, r := range rules {
		var pools []*lbmodel.Pool
		for _, name := range append([]string{r.Pool}, backendPools(r)...) {
			if name != "" {
				pools = append(pools, b.pools[name])
			}
		}
		err := lbmodel.CheckRule(r, pools...)
		if err == nil && b.in.Checker != nil {
			err = b.in.Checker.CheckModel(lbmodel.RuleModel(r, pools...))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fits returns why the rules and the new pools of one route do not fit the
// model: more rules than one object may add, or more bytes than the model
// has left (lbmodel.MaxModelBytes, routes oldest first); nil when they fit,
// and counts them.
func (b *build) fits(rules []lbmodel.Rule, pools []string) error {
	if len(rules) > lbmodel.MaxObjectRules {
		return fmt.Errorf("the route adds %d rules to the Gateway's model, more than %d (its matches times its hostnames and listeners)",
			len(rules), lbmodel.MaxObjectRules)
	}
	n := lbmodel.JSONSize(rules)
	for _, name := range pools {
		n += lbmodel.JSONSize(b.pools[name])
	}
	if b.size+n > lbmodel.MaxModelBytes {
		return fmt.Errorf("with the route's %d bytes the Gateway's model would take more than %d: the older routes fill it",
			n, lbmodel.MaxModelBytes)
	}
	b.size += n
	return nil
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
	policy, _ = b.withTrafficPolicy(rt, index, policy) // checked by checkRule
	p.Policy = withBackendTLS(policy, p.tls)
	if _, ok := b.pools[name]; !ok {
		b.pools[name] = &p.Pool
		b.poolOrder = append(b.poolOrder, name)
	}
	return name
}
