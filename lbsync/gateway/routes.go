package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Route kinds npl-lbsync serves.
const (
	KindGRPCRoute = "GRPCRoute"
	KindTCPRoute  = "TCPRoute"
	KindUDPRoute  = "UDPRoute"
	KindTLSRoute  = "TLSRoute"
)

// RouteKinds are the route kinds npl-lbsync serves, as their informers are
// started.
var RouteKinds = []string{KindHTTPRoute, KindGRPCRoute, KindTCPRoute, KindUDPRoute, KindTLSRoute}

// routeView is what every route kind shares, as attachment, backend
// resolution and the route's parent statuses read it; the kind's own
// object holds the rest.
type routeView struct {
	kind      string
	meta      *metav1.ObjectMeta
	parents   []gatewayv1.ParentReference
	hostnames []gatewayv1.Hostname
	// backendRefs are the backendRefs of each rule.
	backendRefs [][]gatewayv1.BackendRef
	status      *gatewayv1.RouteStatus
	// Exactly one of these is set, for the kind.
	http *gatewayv1.HTTPRoute
	grpc *gatewayv1.GRPCRoute
	tcp  *gatewayv1.TCPRoute
	udp  *gatewayv1.UDPRoute
	tls  *gatewayv1.TLSRoute
}

// id is "Kind namespace/name": the routes of a listener are counted by it.
func (r *routeView) id() string { return r.kind + " " + r.meta.Namespace + "/" + r.meta.Name }

// String is "kind namespace/name" in lower case, as errors name a route.
func (r *routeView) String() string {
	return fmt.Sprintf("%s %s/%s", strings.ToLower(r.kind), r.meta.Namespace, r.meta.Name)
}

// hasHostnames reports whether the kind has hostnames that meet the
// listener's (HTTP, gRPC, TLS); TCP and UDP routes have none.
func (r *routeView) hasHostnames() bool { return r.kind != KindTCPRoute && r.kind != KindUDPRoute }

// routeOf returns the route of one of the route objects npl-lbsync reads,
// nil for anything else.
func routeOf(obj any) *routeView {
	var r *routeView
	switch o := obj.(type) {
	case *gatewayv1.HTTPRoute:
		if o == nil {
			return nil
		}
		r = &routeView{kind: KindHTTPRoute, meta: &o.ObjectMeta, parents: o.Spec.ParentRefs, hostnames: o.Spec.Hostnames, http: o, status: &o.Status.RouteStatus}
		for _, rule := range o.Spec.Rules {
			r.backendRefs = append(r.backendRefs, backendRefs(rule.BackendRefs))
		}
	case *gatewayv1.GRPCRoute:
		if o == nil {
			return nil
		}
		r = &routeView{kind: KindGRPCRoute, meta: &o.ObjectMeta, parents: o.Spec.ParentRefs, hostnames: o.Spec.Hostnames, grpc: o, status: &o.Status.RouteStatus}
		for _, rule := range o.Spec.Rules {
			r.backendRefs = append(r.backendRefs, backendRefs(rule.BackendRefs))
		}
	case *gatewayv1.TCPRoute:
		if o == nil {
			return nil
		}
		r = &routeView{kind: KindTCPRoute, meta: &o.ObjectMeta, parents: o.Spec.ParentRefs, tcp: o, status: &o.Status.RouteStatus}
		for _, rule := range o.Spec.Rules {
			r.backendRefs = append(r.backendRefs, backendRefs(rule.BackendRefs))
		}
	case *gatewayv1.UDPRoute:
		if o == nil {
			return nil
		}
		r = &routeView{kind: KindUDPRoute, meta: &o.ObjectMeta, parents: o.Spec.ParentRefs, udp: o, status: &o.Status.RouteStatus}
		for _, rule := range o.Spec.Rules {
			r.backendRefs = append(r.backendRefs, backendRefs(rule.BackendRefs))
		}
	case *gatewayv1.TLSRoute:
		if o == nil {
			return nil
		}
		r = &routeView{kind: KindTLSRoute, meta: &o.ObjectMeta, parents: o.Spec.ParentRefs, hostnames: o.Spec.Hostnames, tls: o, status: &o.Status.RouteStatus}
		for _, rule := range o.Spec.Rules {
			r.backendRefs = append(r.backendRefs, backendRefs(rule.BackendRefs))
		}
	}
	return r
}

// backendRef is a backendRef of any route kind: HTTPRoute's and
// GRPCRoute's hold a BackendRef and filters of their kind.
type backendRef interface {
	gatewayv1.HTTPBackendRef | gatewayv1.GRPCBackendRef | gatewayv1.BackendRef
}

// backendRefs returns the BackendRef of each of refs, the backendRefs of
// one rule of any route kind: what attachment, backend resolution and
// Backends read of them. The filters of an HTTPRoute's or GRPCRoute's are
// its rule's (backendFilters).
func backendRefs[Ref backendRef](refs []Ref) []gatewayv1.BackendRef {
	out := make([]gatewayv1.BackendRef, 0, len(refs))
	for _, ref := range refs {
		switch r := any(ref).(type) {
		case gatewayv1.HTTPBackendRef:
			out = append(out, r.BackendRef)
		case gatewayv1.GRPCBackendRef:
			out = append(out, r.BackendRef)
		case gatewayv1.BackendRef:
			out = append(out, r)
		}
	}
	return out
}

// backendFilters returns the filters of a rule followed by those of its
// backendRefs (filtersOf reads them): npl-lbsync serves a backendRef's
// filters as its rule's, so only on a rule with one backendRef.
func backendFilters[Filter, Ref any](filters []Filter, refs []Ref, filtersOf func(Ref) []Filter) ([]Filter, error) {
	all := slices.Clone(filters)
	for _, ref := range refs {
		f := filtersOf(ref)
		if len(f) == 0 {
			continue
		}
		if len(refs) > 1 {
			return nil, fmt.Errorf("filters of one backendRef among several are not supported")
		}
		all = append(all, f...)
	}
	return all, nil
}

// RouteKind returns the kind of a route object npl-lbsync reads
// (KindHTTPRoute, ...), "" for anything else.
func RouteKind(obj any) string {
	if r := routeOf(obj); r != nil {
		return r.kind
	}
	return ""
}

// StatusParents returns the status.parents of a route object npl-lbsync
// reads, nil for anything else.
func StatusParents(obj any) []gatewayv1.RouteParentStatus {
	if r := routeOf(obj); r != nil {
		return r.status.Parents
	}
	return nil
}

// WithStatusParents returns a copy of a route object with its
// status.parents set to parents; nil for anything else.
func WithStatusParents(obj any, parents []gatewayv1.RouteParentStatus) any {
	var out any
	switch o := obj.(type) {
	case *gatewayv1.HTTPRoute:
		out = o.DeepCopy()
	case *gatewayv1.GRPCRoute:
		out = o.DeepCopy()
	case *gatewayv1.TCPRoute:
		out = o.DeepCopy()
	case *gatewayv1.UDPRoute:
		out = o.DeepCopy()
	case *gatewayv1.TLSRoute:
		out = o.DeepCopy()
	}
	r := routeOf(out)
	if r == nil {
		return nil
	}
	r.status.Parents = parents
	return out
}

// compareRoutes orders routes by kind, namespace and name.
func compareRoutes(a, b *routeView) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.meta.Namespace, b.meta.Namespace), cmp.Compare(a.meta.Name, b.meta.Name))
}

// Route returns the route object of kind, namespace and name among in's
// routes, nil when it has none.
func (in *Input) Route(kind, namespace, name string) runtime.Object {
	var found runtime.Object
	in.eachRoute(func(obj runtime.Object) {
		if r := routeOf(obj); r != nil && r.kind == kind && r.meta.Namespace == namespace && r.meta.Name == name {
			found = obj
		}
	})
	return found
}

// eachRoute calls f with each route of in, of every kind.
func (in *Input) eachRoute(f func(runtime.Object)) {
	for _, r := range in.Routes {
		f(r)
	}
	for _, r := range in.GRPCRoutes {
		f(r)
	}
	for _, r := range in.TCPRoutes {
		f(r)
	}
	for _, r := range in.UDPRoutes {
		f(r)
	}
	for _, r := range in.TLSRoutes {
		f(r)
	}
}

// AddRoute puts a route object of any kind npl-lbsync reads into the
// field of its kind; it ignores anything else.
func (in *Input) AddRoute(obj any) {
	switch rt := obj.(type) {
	case *gatewayv1.HTTPRoute:
		in.Routes = append(in.Routes, rt)
	case *gatewayv1.GRPCRoute:
		in.GRPCRoutes = append(in.GRPCRoutes, rt)
	case *gatewayv1.TCPRoute:
		in.TCPRoutes = append(in.TCPRoutes, rt)
	case *gatewayv1.UDPRoute:
		in.UDPRoutes = append(in.UDPRoutes, rt)
	case *gatewayv1.TLSRoute:
		in.TLSRoutes = append(in.TLSRoutes, rt)
	}
}
