package gateway

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
)

// A route rule's backendRefs: resolved to Service ports, and their Pods
// made the members of the rule's pool, weighted as weights.go says.

// backendRef resolves one backendRef to its Service port, or says why it
// is invalid.
func (b *build) backendRef(rt *routeView, ref gatewayv1.BackendRef) (backend, gatewayv1.RouteConditionReason, string) {
	r := refOf(ref.Group, ref.Kind, ref.Namespace, ref.Name, KindService, rt.meta.Namespace)
	id := r.String()
	if !r.is(KindService) {
		return backend{}, gatewayv1.RouteReasonInvalidKind, fmt.Sprintf("backendRef %s: kind %s/%s is not a Service", id, r.group, r.kind)
	}
	if !b.allowed(rt.kind, rt.meta.Namespace, r) {
		return backend{}, gatewayv1.RouteReasonRefNotPermitted, fmt.Sprintf("backendRef %s: no ReferenceGrant allows it", id)
	}
	svc := b.services[id]
	if svc == nil {
		return backend{}, gatewayv1.RouteReasonBackendNotFound, fmt.Sprintf("backend Service %s not found", id)
	}
	if ref.Port == nil {
		return backend{}, gatewayv1.RouteReasonUnsupportedValue, fmt.Sprintf("backendRef %s has no port", id)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port })
	if i < 0 {
		return backend{}, gatewayv1.RouteReasonBackendNotFound, fmt.Sprintf("backend Service %s has no port %d", id, *ref.Port)
	}
	return backend{svc: svc, port: svc.Spec.Ports[i], weight: refWeight(ref)}, "", ""
}

// refWeight is the weight of a backendRef, valid or not: 1 unless given.
func refWeight(ref gatewayv1.BackendRef) int32 {
	if ref.Weight != nil {
		return *ref.Weight
	}
	return 1
}

type backend struct {
	svc    *corev1.Service
	port   corev1.ServicePort
	weight int32
}

// String is "Service namespace/name port N".
func (be backend) String() string {
	return fmt.Sprintf("Service %s/%s port %d", be.svc.Namespace, be.svc.Name, be.port.Port)
}

// servedBackends returns the valid backendRefs of rule i of a route with a
// weight: those whose Pods its pool may hold.
func (b *build) servedBackends(rt *routeView, i int) []backend {
	var out []backend
	for _, br := range rt.backendRefs[i] {
		if be, reason, _ := b.backendRef(rt, br); reason == "" && be.weight > 0 {
			out = append(out, be)
		}
	}
	return out
}

// backendPool is the pool of the valid backendRefs of a route rule.
type backendPool struct {
	lbmodel.Pool
	// hasBackends is false when no backendRef is valid with a weight
	// above zero.
	hasBackends bool
	// tls is the TLS to the members that the backends' BackendTLSPolicy
	// asks for (backendtls.go).
	tls *lbmodel.BackendTLS
}

// backendPool builds the pool of rule index of a route from its valid
// backendRefs, whose Service ports must be of protocol proto; every
// Service validly named is a backend (opted in). The pool is h2c for a
// GRPCRoute, and for an HTTPRoute whose backends all have appProtocol
// kubernetes.io/h2c. The pool of an HTTPRoute or GRPCRoute rule answers
// the share of its invalid backendRefs 500 (InvalidWeight), as Gateway API
// requires; TCP, UDP and TLS routes, whose connections cannot be answered
// a status, leave that share out.
func (b *build) backendPool(rt *routeView, index int, name string, proto corev1.Protocol) *backendPool {
	if index >= len(rt.backendRefs) {
		return &backendPool{Pool: lbmodel.Pool{Name: name, Members: []lbmodel.Member{}}}
	}
	var valid []backend
	var tlsOf *lbmodel.BackendTLS
	invalid := int32(0)
	for _, br := range rt.backendRefs[index] {
		be, reason, _ := b.backendRef(rt, br)
		if reason != "" {
			if rt.kind == KindHTTPRoute || rt.kind == KindGRPCRoute {
				invalid += max(refWeight(br), 0)
			}
			continue
		}
		b.backends[ServiceRef{Namespace: be.svc.Namespace, Name: be.svc.Name}] = true
		tls, refused := b.backendTLS(rt, be)
		if refused != "" {
			b.warnf("%s: rule %d: backend Service %s/%s port %d is left out: %s", rt, index, be.svc.Namespace, be.svc.Name, be.port.Port, refused)
			if rt.kind == KindHTTPRoute || rt.kind == KindGRPCRoute {
				invalid += max(be.weight, 0)
			}
			continue
		}
		if be.weight > 0 {
			valid = append(valid, be)
			b.r.AddPoolBackend(name, be.svc.Namespace+"/"+be.svc.Name)
			tlsOf = cmp.Or(tlsOf, tls) // the backends agree (checkBackendTLS)
		}
	}
	out := &backendPool{Pool: lbmodel.Pool{Name: name, Members: []lbmodel.Member{}}, hasBackends: len(valid) > 0, tls: tlsOf}
	if len(valid) == 0 {
		return out
	}
	groups := make([][]lbmodel.Member, len(valid))
	h2c := true
	for i, be := range valid {
		groups[i] = b.members(rt, be, proto)
		h2c = h2c && be.port.AppProtocol != nil && *be.port.AppProtocol == appProtocolH2C
	}
	if rt.kind == KindGRPCRoute || (rt.kind == KindHTTPRoute && h2c) {
		out.AppProtocol = lbmodel.AppProtocolH2C
	}
	out.Members, out.InvalidWeight = weighted(valid, groups, invalid)
	if out.Members == nil {
		out.Members = []lbmodel.Member{}
	}
	return out
}

// appProtocolH2C is the Service port appProtocol of HTTP/2 without TLS.
const appProtocolH2C = "kubernetes.io/h2c"

// members builds the members of one backend Service port, as the L4
// builder does, or reports why it has none.
func (b *build) members(rt *routeView, be backend, proto corev1.Protocol) []lbmodel.Member {
	svcID := be.svc.Namespace + "/" + be.svc.Name
	switch {
	case be.svc.Spec.Type == corev1.ServiceTypeExternalName:
		b.errorf("%s: backend Service %s is of type ExternalName, which has no Pods: no members", rt, svcID)
		return nil
	case cmp.Or(be.port.Protocol, corev1.ProtocolTCP) != proto:
		b.errorf("%s: backend Service %s port %d is %s, not %s: no members", rt, svcID, be.port.Port, cmp.Or(be.port.Protocol, corev1.ProtocolTCP), proto)
		return nil
	case be.svc.Spec.Type == corev1.ServiceTypeNodePort && cmp.Or(b.in.ServiceType, builder.ServiceTypeNodePortLocal) == builder.ServiceTypeNodePortLocal:
		b.warnf("%s: backend Service %s is of type NodePort: NodePortLocal does not map its Pods, no members; make it a ClusterIP Service",
			rt, svcID)
		return nil
	}
	members, rep := builder.Members(builder.Input{
		ClusterName: b.in.ClusterName, ServiceType: b.in.ServiceType, Family: b.in.Family, Service: be.svc,
		Pods: b.in.Pods, Nodes: b.in.Nodes, EndpointSlices: b.in.EndpointSlices, AgentPorts: b.in.AgentPorts,
	}, be.port)
	b.r.AddBackend(svcID, rep)
	return members
}

// splitBackends builds, for rule index of an HTTPRoute that splits its
// requests between its backendRefs (splitsBackends), a pool for each valid
// backendRef with its own request header filter, and returns the rule's
// backends in the backendRefs' order: each backendRef with a weight above
// zero has its share, answered 500 when it is invalid (or its
// BackendTLSPolicy is refused), as backendPool answers it. A valid
// backendRef without members has no share, its requests go to the others
// (as weighted does), unless none has members. Nil when no valid
// backendRef has a weight: the rule answers 500.
func (b *build) splitBackends(rt *routeView, index int) []lbmodel.RuleBackend {
	policy, warnings, _ := rulePolicy(rt, index) // checked by checkRule
	for _, w := range warnings {
		b.warnf("%s: rule %d: %s", rt, index, w)
	}
	type split struct {
		lbmodel.RuleBackend
		pool *lbmodel.Pool
		svc  string
	}
	var all []split
	withMembers := false
	for j, br := range rt.http.Spec.Rules[index].BackendRefs {
		weight := refWeight(br.BackendRef)
		if weight <= 0 {
			continue
		}
		be, reason, _ := b.backendRef(rt, br.BackendRef)
		if reason != "" {
			all = append(all, split{RuleBackend: lbmodel.RuleBackend{Weight: weight}})
			continue
		}
		b.backends[ServiceRef{Namespace: be.svc.Namespace, Name: be.svc.Name}] = true
		tls, refused := b.backendTLS(rt, be)
		if refused != "" {
			b.warnf("%s: rule %d: backend Service %s/%s port %d is left out: %s", rt, index, be.svc.Namespace, be.svc.Name, be.port.Port, refused)
			all = append(all, split{RuleBackend: lbmodel.RuleBackend{Weight: weight}})
			continue
		}
		name := lbmodel.GatewayRouteBackendPoolName(b.lbName, rt.kind, rt.meta.Namespace, rt.meta.Name, index, j)
		pool := &lbmodel.Pool{Name: name, Members: b.members(rt, be, corev1.ProtocolTCP), Policy: withBackendTLS(policy.Clone(), tls)}
		if pool.Members == nil {
			pool.Members = []lbmodel.Member{}
		}
		if be.port.AppProtocol != nil && *be.port.AppProtocol == appProtocolH2C {
			pool.AppProtocol = lbmodel.AppProtocolH2C
		}
		filter, _ := backendRefFilter(br) // checked by checkRoute
		withMembers = withMembers || len(pool.Members) > 0
		all = append(all, split{RuleBackend: lbmodel.RuleBackend{Pool: name, Weight: weight, RequestHeaders: filter}, pool: pool,
			svc: be.svc.Namespace + "/" + be.svc.Name})
	}
	var out []lbmodel.RuleBackend
	pools := false
	for _, s := range all {
		if s.pool != nil && withMembers && len(s.pool.Members) == 0 {
			continue
		}
		if s.pool != nil {
			pools = true
			b.r.AddPoolBackend(s.Pool, s.svc)
			if _, ok := b.pools[s.Pool]; !ok {
				b.pools[s.Pool] = s.pool
				b.poolOrder = append(b.poolOrder, s.Pool)
			}
		}
		out = append(out, s.RuleBackend)
	}
	if !pools {
		return nil
	}
	return out
}

// backendPools are the pools of the backends of rule r (Rule.Backends),
// "" for a share answered 500.
func backendPools(r lbmodel.Rule) []string {
	out := make([]string, len(r.Backends))
	for i, be := range r.Backends {
		out[i] = be.Pool
	}
	return out
}
