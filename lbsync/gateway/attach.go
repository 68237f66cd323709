package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Which routes attach to which listeners: the routes that name the
// Gateway, their parentRefs' conditions, the hosts each serves per
// listener port.

// NamesGateway reports whether a parentRef of a route in routeNamespace
// names the Gateway namespace/name.
func NamesGateway(routeNamespace string, ref gatewayv1.ParentReference, namespace, name string) bool {
	ns, n, ok := gatewayOf(routeNamespace, ref)
	return ok && ns == namespace && n == name
}

// gatewayOf returns the Gateway a parentRef of a route in routeNamespace
// names; ok is false when it names no Gateway.
func gatewayOf(routeNamespace string, ref gatewayv1.ParentReference) (namespace, name string, ok bool) {
	if (ref.Group != nil && string(*ref.Group) != Group) || (ref.Kind != nil && string(*ref.Kind) != KindGateway) {
		return "", "", false
	}
	namespace = routeNamespace
	if ref.Namespace != nil {
		namespace = string(*ref.Namespace)
	}
	return namespace, string(ref.Name), true
}

// attachment is where a route is served: per listener port, its hosts.
type attachment struct {
	route *routeView
	// hosts are the effective hosts per listener port ("" for any).
	hosts map[int32][]string
	// on are the served listeners the route attaches to, with their
	// effective hosts, in spec order.
	on []listenerHosts
	// accepted is false when the route itself cannot be served.
	accepted metav1.Condition
	resolved metav1.Condition
	// refused are the hosts it claims on shared listeners that another
	// namespace owns (ownership.go).
	refused []refusedHost
}

// listenerHosts is a listener a route attaches to and the route's hosts
// on it.
type listenerHosts struct {
	l     *listener
	hosts []string
}

// candidates returns the routes of every kind that name the Gateway,
// sorted by kind, namespace and name.
func (b *build) candidates() []*routeView {
	var out []*routeView
	b.in.eachRoute(func(obj runtime.Object) {
		r := routeOf(obj)
		if r != nil && slices.ContainsFunc(r.parents, func(p gatewayv1.ParentReference) bool {
			return NamesGateway(r.meta.Namespace, p, b.gw.Namespace, b.gw.Name)
		}) {
			out = append(out, r)
		}
	})
	slices.SortFunc(out, compareRoutes)
	return out
}

// routes decides the parent status of every route that names the Gateway
// and returns where the accepted ones attach, oldest first.
func (b *build) routes(ls []*listener, res *Result) []*attachment {
	var out []*attachment
	// Oldest first: a route claims the hosts of shared listeners in that
	// order (ownership.go).
	cands := b.candidates()
	slices.SortStableFunc(cands, byAge)
	for _, rt := range cands {
		at := &attachment{route: rt, hosts: map[int32][]string{}}
		at.accepted, at.resolved = b.checkRoute(rt)
		rr := RouteResult{Kind: rt.kind, Namespace: rt.meta.Namespace, Name: rt.meta.Name}
		for _, ref := range rt.parents {
			if !NamesGateway(rt.meta.Namespace, ref, b.gw.Namespace, b.gw.Name) {
				continue
			}
			refused, hosts := len(at.refused), countHosts(at.hosts)
			accepted := b.attach(rt, ref, ls, at)
			if accepted.Status == metav1.ConditionTrue && at.accepted.Status != metav1.ConditionTrue {
				accepted = at.accepted
			}
			if len(at.refused) > refused && accepted.Status == metav1.ConditionTrue {
				accepted = b.hostsRefused(rt, accepted, at.refused[refused:], countHosts(at.hosts) > hosts)
			}
			ps := gatewayv1.RouteParentStatus{ParentRef: parentRefWithDefaults(ref), ControllerName: ControllerName,
				Conditions: []metav1.Condition{accepted, at.resolved}}
			rr.Parents = append(rr.Parents, ps)
		}
		if len(at.refused) > 0 {
			msg := refusedMessage(at.refused)
			b.errorf("%s: %s", rt, msg)
			res.RouteEvents = append(res.RouteEvents, RouteEvent{Kind: rt.kind, Namespace: rt.meta.Namespace, Name: rt.meta.Name,
				Reason: ReasonHostnameInUse, Message: msg})
		}
		res.Routes = append(res.Routes, rr)
		if len(at.hosts) > 0 && at.accepted.Status == metav1.ConditionTrue {
			out = append(out, at)
		}
	}
	slices.SortFunc(res.Routes, func(x, y RouteResult) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	// The order of precedence: the oldest first, then by kind, namespace
	// and name, as before routes claimed hosts.
	slices.SortFunc(out, func(x, y *attachment) int {
		return cmp.Or(x.route.meta.CreationTimestamp.Compare(y.route.meta.CreationTimestamp.Time), compareRoutes(x.route, y.route))
	})
	return out
}

// hostsRefused is the Accepted condition of a parentRef through which a
// route attached but some of its hosts are owned by another namespace:
// still True when it got others (served), with the refused ones in the
// message, else False HostnameInUse.
func (b *build) hostsRefused(rt *routeView, accepted metav1.Condition, refused []refusedHost, served bool) metav1.Condition {
	if served {
		accepted.Message = "Accepted; " + refusedMessage(refused)
		return accepted
	}
	return b.cond(accepted.Type, false, ReasonHostnameInUse, refusedMessage(refused), rt.meta.Generation)
}

// countHosts counts the hosts of an attachment over its ports.
func countHosts(hosts map[int32][]string) int {
	n := 0
	for _, hs := range hosts {
		n += len(hs)
	}
	return n
}

func parentRefWithDefaults(ref gatewayv1.ParentReference) gatewayv1.ParentReference {
	ref = *ref.DeepCopy()
	if ref.Group == nil {
		g := gatewayv1.Group(Group)
		ref.Group = &g
	}
	if ref.Kind == nil {
		k := gatewayv1.Kind(KindGateway)
		ref.Kind = &k
	}
	return ref
}

// attach attaches a route through one parentRef to the listeners it
// selects, records the hosts, and returns the parentRef's Accepted
// condition.
func (b *build) attach(rt *routeView, ref gatewayv1.ParentReference, ls []*listener, at *attachment) metav1.Condition {
	gen := rt.meta.Generation
	typ := string(gatewayv1.RouteConditionAccepted)
	var candidates []*listener
	for _, l := range ls {
		if ref.SectionName != nil && l.spec.Name != *ref.SectionName {
			continue
		}
		if ref.Port != nil && l.spec.Port != *ref.Port {
			continue
		}
		candidates = append(candidates, l)
	}
	if len(candidates) == 0 {
		return b.cond(typ, false, string(gatewayv1.RouteReasonNoMatchingParent), "no listener matches the parentRef's sectionName and port", gen)
	}
	var allowed []*listener
	for _, l := range candidates {
		if l.ok() && l.serves(rt.kind) && b.namespaceAllowed(l, rt.meta.Namespace) {
			allowed = append(allowed, l)
		}
	}
	if len(allowed) == 0 {
		return b.cond(typ, false, string(gatewayv1.RouteReasonNotAllowedByListeners), "no listener allows this route", gen)
	}
	attached := false
	for _, l := range allowed {
		hosts := []string{""}
		if rt.hasHostnames() {
			hosts = intersect(l.hostname, rt.hostnames)
		}
		if len(hosts) == 0 {
			continue
		}
		attached = true
		l.routes[rt.id()] = true
		if l.served() {
			port := l.spec.Port
			on := listenerHosts{l: l}
			for _, h := range hosts {
				if capturedElsewhere(l, h, ls) {
					continue
				}
				if l.shared() {
					if o := b.owner(l, h, rt); o.meta.Namespace != rt.meta.Namespace {
						at.refused = append(at.refused, refusedHost{port: port, host: h, owner: o})
						continue
					}
				}
				at.hosts[port] = append(at.hosts[port], h)
				on.hosts = append(on.hosts, h)
			}
			if !slices.ContainsFunc(at.on, func(o listenerHosts) bool { return o.l == l }) {
				at.on = append(at.on, on)
			}
		}
	}
	if !attached {
		return b.cond(typ, false, string(gatewayv1.RouteReasonNoMatchingListenerHostname), "no listener hostname matches the route's hostnames", gen)
	}
	return b.cond(typ, true, string(gatewayv1.RouteReasonAccepted), "Accepted", gen)
}

func (b *build) namespaceAllowed(l *listener, ns string) bool {
	from := gatewayv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.spec.AllowedRoutes != nil && l.spec.AllowedRoutes.Namespaces != nil {
		if f := l.spec.AllowedRoutes.Namespaces.From; f != nil {
			from = *f
		}
		sel = l.spec.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true
	case gatewayv1.NamespacesFromSame:
		return ns == b.gw.Namespace
	case gatewayv1.NamespacesFromSelector:
		if sel == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false
		}
		lbls, ok := b.nsLabels[ns]
		return ok && s.Matches(lbls)
	}
	return false
}

// intersect returns the hosts a listener of hostname serves a route of
// hostnames on, "" standing for every host; none when they do not meet.
func intersect(listener string, hostnames []gatewayv1.Hostname) []string {
	if len(hostnames) == 0 {
		return []string{listener}
	}
	var out []string
	for _, h := range hostnames {
		r := strings.ToLower(string(h))
		var got string
		switch {
		case listener == "" || listener == r:
			got = r
		case strings.HasPrefix(listener, "*.") && strings.HasSuffix(r, listener[1:]):
			got = r
		case strings.HasPrefix(r, "*.") && strings.HasSuffix(listener, r[1:]):
			got = listener
		default:
			continue
		}
		if !slices.Contains(out, got) {
			out = append(out, got)
		}
	}
	return out
}

// checkRoute returns the route's own Accepted condition (True unless it
// uses what npl-lbsync cannot serve: checkRule of its kind) and its
// ResolvedRefs condition.
func (b *build) checkRoute(rt *routeView) (accepted, resolved metav1.Condition) {
	gen := rt.meta.Generation
	accepted = b.cond(string(gatewayv1.RouteConditionAccepted), true, string(gatewayv1.RouteReasonAccepted), "Accepted", gen)
	resolved = b.cond(string(gatewayv1.RouteConditionResolvedRefs), true, string(gatewayv1.RouteReasonResolvedRefs), "References resolved", gen)
	for i, refs := range rt.backendRefs {
		if reason, err := b.checkRule(rt, i); err != nil {
			accepted = b.cond(string(gatewayv1.RouteConditionAccepted), false, string(reason), fmt.Sprintf("rule %d: %v", i, err), gen)
			b.errorf("%s: rule %d: %v", rt, i, err)
			return accepted, resolved
		}
		for _, br := range refs {
			if _, reason, msg := b.backendRef(rt, br); reason != "" && resolved.Status == metav1.ConditionTrue {
				resolved = b.cond(string(gatewayv1.RouteConditionResolvedRefs), false, string(reason), msg, gen)
			}
		}
	}
	if resolved.Status != metav1.ConditionTrue {
		b.errorf("%s: %s", rt, resolved.Message)
	}
	return accepted, resolved
}

// checkRule says why rule i of a route cannot be served, by its kind, or
// its traffic policy (rulePolicy, checkBackendTLS, checkTrafficPolicy).
func (b *build) checkRule(rt *routeView, i int) (gatewayv1.RouteConditionReason, error) {
	var reason gatewayv1.RouteConditionReason
	var err error
	switch rt.kind {
	case KindHTTPRoute:
		reason, err = b.checkHTTPRule(rt, i)
	case KindGRPCRoute:
		reason, err = checkGRPCRule(&rt.grpc.Spec.Rules[i])
	default:
		return "", nil
	}
	if err == nil {
		var policy *lbmodel.Policy
		if policy, _, err = rulePolicy(rt, i); err == nil {
			err = cmp.Or(b.checkBackendTLS(rt, i), b.checkTrafficPolicy(rt, i, policy), b.checkSplitPersistence(rt, i, policy))
		}
		if err != nil {
			reason = gatewayv1.RouteReasonUnsupportedValue
		}
	}
	return reason, err
}
