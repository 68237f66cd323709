package controller

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// The indexes of the route informers.
const (
	// routeParentIndex indexes routes by the "namespace/name" of each
	// Gateway their parentRefs name.
	routeParentIndex = "parentGateway"
	// routeBackendIndex indexes routes by the "namespace/name" of each
	// Service their backendRefs name.
	routeBackendIndex = "backendService"
)

func routeParents(obj any) ([]string, error) {
	rt, ok := obj.(metav1.Object)
	if !ok || gateway.RouteKind(obj) == "" {
		return nil, nil
	}
	keys := gateway.Gateways(obj)
	// A Gateway whose entry the route's status still holds must hear of
	// the route, to remove it.
	for _, p := range gateway.StatusParents(obj) {
		if p.ControllerName != gateway.ControllerName {
			continue
		}
		ns := rt.GetNamespace()
		if p.ParentRef.Namespace != nil {
			ns = string(*p.ParentRef.Namespace)
		}
		if k := ns + "/" + string(p.ParentRef.Name); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func routeBackends(obj any) ([]string, error) {
	var out []string
	for _, b := range gateway.Backends(obj) {
		out = append(out, b.String())
	}
	return out, nil
}

// routeKind is the informer of one route kind and how its status is
// written.
type routeKind struct {
	kind     string
	informer cache.SharedIndexInformer
	// updateStatus writes the status of a route object of the kind.
	updateStatus func(ctx context.Context, obj any) error
}

// newRouteKind makes the informer of a route kind.
func newRouteKind(kind string, factory gatewayinformers.SharedInformerFactory, client gatewayclient.Interface) routeKind {
	v1 := factory.Gateway().V1()
	api := client.GatewayV1()
	opts := metav1.UpdateOptions{}
	rk := routeKind{kind: kind}
	switch kind {
	case gateway.KindHTTPRoute:
		rk.informer = v1.HTTPRoutes().Informer()
		rk.updateStatus = func(ctx context.Context, obj any) error {
			rt := obj.(*gatewayv1.HTTPRoute)
			_, err := api.HTTPRoutes(rt.Namespace).UpdateStatus(ctx, rt, opts)
			return err
		}
	case gateway.KindGRPCRoute:
		rk.informer = v1.GRPCRoutes().Informer()
		rk.updateStatus = func(ctx context.Context, obj any) error {
			rt := obj.(*gatewayv1.GRPCRoute)
			_, err := api.GRPCRoutes(rt.Namespace).UpdateStatus(ctx, rt, opts)
			return err
		}
	case gateway.KindTCPRoute:
		rk.informer = v1.TCPRoutes().Informer()
		rk.updateStatus = func(ctx context.Context, obj any) error {
			rt := obj.(*gatewayv1.TCPRoute)
			_, err := api.TCPRoutes(rt.Namespace).UpdateStatus(ctx, rt, opts)
			return err
		}
	case gateway.KindUDPRoute:
		rk.informer = v1.UDPRoutes().Informer()
		rk.updateStatus = func(ctx context.Context, obj any) error {
			rt := obj.(*gatewayv1.UDPRoute)
			_, err := api.UDPRoutes(rt.Namespace).UpdateStatus(ctx, rt, opts)
			return err
		}
	case gateway.KindTLSRoute:
		rk.informer = v1.TLSRoutes().Informer()
		rk.updateStatus = func(ctx context.Context, obj any) error {
			rt := obj.(*gatewayv1.TLSRoute)
			_, err := api.TLSRoutes(rt.Namespace).UpdateStatus(ctx, rt, opts)
			return err
		}
	default:
		panic("unknown route kind " + kind)
	}
	utilruntime.Must(rk.informer.AddIndexers(cache.Indexers{routeParentIndex: routeParents, routeBackendIndex: routeBackends}))
	return rk
}

// routesByIndex returns the routes of every kind served under an index
// value.
func (g *gatewayState) routesByIndex(index, value string) []any {
	var out []any
	for _, rk := range g.routeKinds {
		objs, _ := rk.informer.GetIndexer().ByIndex(index, value)
		out = append(out, objs...)
	}
	return out
}

// routeKindOf returns the routeKind of a route object.
func (g *gatewayState) routeKindOf(obj any) *routeKind {
	kind := gateway.RouteKind(obj)
	for i := range g.routeKinds {
		if g.routeKinds[i].kind == kind {
			return &g.routeKinds[i]
		}
	}
	return nil
}
