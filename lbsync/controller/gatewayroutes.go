package controller

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// optionalRouteResources are the route resources beyond HTTPRoute, by
// kind: npl-lbsync serves those whose CRDs are installed.
var optionalRouteResources = map[string]string{
	gateway.KindGRPCRoute: "grpcroutes",
	gateway.KindTCPRoute:  "tcproutes",
	gateway.KindUDPRoute:  "udproutes",
	gateway.KindTLSRoute:  "tlsroutes",
}

// GatewayRouteKindsServed returns the route kinds beyond HTTPRoute whose
// v1 resources the API server serves, and those it does not, in the order
// of gateway.RouteKinds.
func GatewayRouteKindsServed(d discovery.DiscoveryInterface) (served, missing []string, err error) {
	list, err := d.ServerResourcesForGroupVersion(gatewayv1.GroupVersion.String())
	if err != nil {
		return nil, nil, fmt.Errorf("discover %s: %w", gatewayv1.GroupVersion, err)
	}
	for _, kind := range gateway.RouteKinds {
		res, ok := optionalRouteResources[kind]
		if !ok {
			continue
		}
		if slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == res }) {
			served = append(served, kind)
		} else {
			missing = append(missing, kind)
		}
	}
	return served, missing, nil
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

// addRoute puts a route object into the Input of its kind.
func addRoute(in *gateway.Input, obj any) {
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
