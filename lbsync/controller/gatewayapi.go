package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gatewaylisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// gatewayState is the Gateway API part of the controller, set by
// EnableGatewayAPI or ServeGatewayAPI: its client and informers, whose
// caches the reconcilers read through cluster.gwState.
type gatewayState struct {
	client   gatewayclient.Interface
	factory  gatewayinformers.SharedInformerFactory
	classes  gatewaylisters.GatewayClassLister
	gateways gatewaylisters.GatewayLister
	// routeKinds are the route kinds served, HTTPRoute first.
	routeKinds []routeKind
	grants     gatewaylisters.ReferenceGrantLister
	// backendTLS is nil unless BackendTLSPolicies are served.
	backendTLS *backendTLSState
	// traffic is nil unless XBackendTrafficPolicies are served.
	traffic *trafficPolicyKind
	// configMaps watches the ConfigMaps the Gateways name as their
	// client CA certificates (spec.tls.frontend) and BackendTLSPolicies as
	// their backends'; gwIndexer indexes the Gateways by theirs
	// (gatewayCAIndex).
	configMaps *configMapWatch
	gwIndexer  cache.Indexer
	// cancel stops the informers of a state ServeGatewayAPI started.
	cancel    context.CancelFunc
	namespace cache.Indexer
}

// EnableGatewayAPI makes the controller serve the Gateways of npl's
// GatewayClasses with client, with their HTTPRoutes and the kinds given
// (of inputs.GatewayKindsServed: route kinds, BackendTLSPolicy,
// XBackendTrafficPolicy); call it
// before Start, once the Gateway API CRDs are known to be served
// (inputs.GatewayAPIServed).
func (c *Controller) EnableGatewayAPI(client gatewayclient.Interface, kinds ...string) {
	g, synced := c.newGatewayState(client, kinds)
	c.synced = append(c.synced, synced...)
	c.gwp.Store(g)
}

// ServeGatewayAPI makes a started controller serve the Gateway API with
// the kinds given, HTTPRoute always: when the CRDs appear after the start
// (GatewayCRDs). It starts new informers, waits for their caches,
// then replaces the Gateway API part, if any, stops its informers and
// queues every GatewayClass and Gateway.
func (c *Controller) ServeGatewayAPI(ctx context.Context, client gatewayclient.Interface, kinds ...string) error {
	g, synced := c.newGatewayState(client, kinds)
	gctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	c.factory.Start(ctx.Done()) // the Namespace informer, new unless the Gateway API was served before
	g.run(gctx)
	g.factory.Start(gctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		cancel()
		return fmt.Errorf("wait for the Gateway API informer caches: %w", ctx.Err())
	}
	if old := c.gwp.Swap(g); old != nil && old.cancel != nil {
		old.cancel()
	}
	c.queueKeys(append(c.classes.keys(), c.gateways.keys()...))
	return nil
}

// GatewayKinds returns the kinds served: the route kinds, HTTPRoute
// first, and BackendTLSPolicy and XBackendTrafficPolicy when they are;
// none when the Gateway API is not
// served.
func (c *Controller) GatewayKinds() []string {
	g := c.gwState()
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.routeKinds)+2)
	for _, rk := range g.routeKinds {
		out = append(out, rk.kind)
	}
	if g.backendTLS != nil {
		out = append(out, gateway.KindBackendTLSPolicy)
	}
	if g.traffic != nil {
		out = append(out, gateway.KindXBackendTrafficPolicy)
	}
	return out
}

// run starts what of the state is not a factory's informer: the watches
// of the ConfigMaps BackendTLSPolicies and Gateways name.
func (g *gatewayState) run(ctx context.Context) {
	g.configMaps.run(ctx)
}

// gatewayCAIndex indexes Gateways by the "namespace/name" of each
// ConfigMap their spec.tls.frontend names.
const gatewayCAIndex = "frontendCAConfigMap"

// watchFrontendCAs indexes the Gateways of gwInf by their client CA
// ConfigMaps and has g.configMaps watch those ConfigMaps.
func (c *Controller) watchFrontendCAs(g *gatewayState, gwInf cache.SharedIndexInformer) {
	utilruntime.Must(gwInf.AddIndexers(cache.Indexers{gatewayCAIndex: func(obj any) ([]string, error) {
		if gw, ok := obj.(*gatewayv1.Gateway); ok {
			return gateway.FrontendCAConfigMaps(gw), nil
		}
		return nil, nil
	}}))
	g.gwIndexer = gwInf.GetIndexer()
	set := func(any) { g.configMaps.set(gateway.KindGateway, g.gwIndexer.ListIndexFuncValues(gatewayCAIndex)) }
	_, _ = gwInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: set, UpdateFunc: func(_, obj any) { set(obj) }, DeleteFunc: set,
	})
}

// caConfigMapChanged queues the Gateways a change of a CA ConfigMap
// concerns: those that name it for their clients, and those whose routes
// send to Services of the BackendTLSPolicies that name it.
func (c *Controller) caConfigMapChanged(g *gatewayState, key string) {
	objs, _ := g.gwIndexer.ByIndex(gatewayCAIndex, key)
	for _, o := range objs {
		if gw, ok := o.(*gatewayv1.Gateway); ok {
			c.queue.Add(gatewayKey(gw.Namespace, gw.Name))
		}
	}
	if g.backendTLS != nil {
		c.backendTLSConfigMapChanged(g.backendTLS, key)
	}
}

// gwState returns the Gateway API part, nil when it is not served.
func (c *cluster) gwState() *gatewayState { return c.gwp.Load() }

// newGatewayState makes the informers of the Gateway API and the kinds
// given (route kinds, HTTPRoute always; BackendTLSPolicy,
// XBackendTrafficPolicy), with their
// handlers, and returns them with what tells that their caches are synced.
func (c *Controller) newGatewayState(client gatewayclient.Interface, kinds []string) (*gatewayState, []cache.InformerSynced) {
	factory := gatewayinformers.NewSharedInformerFactoryWithOptions(client, 0, gatewayinformers.WithTransform(trimGatewayObject))
	v1 := factory.Gateway().V1()
	g := &gatewayState{client: client, factory: factory}
	g.configMaps = newConfigMapWatch(c.client, func(key string) { c.caConfigMapChanged(g, key) })
	classInf, gwInf, grantInf := v1.GatewayClasses(), v1.Gateways(), v1.ReferenceGrants()
	nsInf := c.factory.Core().V1().Namespaces()
	for _, kind := range append([]string{gateway.KindHTTPRoute}, kinds...) {
		switch {
		case kind == gateway.KindBackendTLSPolicy:
			g.backendTLS = c.newBackendTLSState(factory, client, g.configMaps)
		case kind == gateway.KindXBackendTrafficPolicy:
			g.traffic = c.newTrafficPolicyKind(factory, client)
		case kind == gateway.KindHTTPRoute && len(g.routeKinds) > 0:
		default:
			g.routeKinds = append(g.routeKinds, newRouteKind(kind, factory, client))
		}
	}
	g.classes, g.gateways, g.grants = classInf.Lister(), gwInf.Lister(), grantInf.Lister()
	c.watchFrontendCAs(g, gwInf.Informer())
	g.namespace = nsInf.Informer().GetIndexer()

	_, _ = classInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.gatewayClassChanged,
		UpdateFunc: func(_, obj any) { c.gatewayClassChanged(obj) },
		DeleteFunc: c.gatewayClassChanged,
	})
	_, _ = gwInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.gateways.gatewayChanged,
		UpdateFunc: func(old, obj any) { c.writes.observed(obj); c.gateways.gatewayUpdated(old, obj) },
		DeleteFunc: c.gateways.gatewayChanged,
	})
	synced := []cache.InformerSynced{classInf.Informer().HasSynced, gwInf.Informer().HasSynced,
		grantInf.Informer().HasSynced, nsInf.Informer().HasSynced}
	for _, rk := range g.routeKinds {
		_, _ = rk.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.gateways.routeChanged(nil, obj) },
			UpdateFunc: c.gateways.routeChanged,
			DeleteFunc: func(obj any) { c.gateways.routeChanged(obj, nil) },
		})
		synced = append(synced, rk.informer.HasSynced)
	}
	if g.backendTLS != nil {
		synced = append(synced, g.backendTLS.informer.HasSynced)
	}
	if g.traffic != nil {
		synced = append(synced, g.traffic.informer.HasSynced)
	}
	all := func(any) { c.gateways.queueAll() }
	_, _ = grantInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: all, UpdateFunc: func(_, obj any) { all(obj) }, DeleteFunc: all,
	})
	c.nsHandler.Do(func() {
		_, _ = nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) {
				o, ok1 := old.(*corev1.Namespace)
				n, ok2 := obj.(*corev1.Namespace)
				if ok1 && ok2 && !labels.Equals(o.Labels, n.Labels) {
					c.gateways.queueAll()
				}
			},
		})
	})
	return g, synced
}

// gatewayClassChanged queues a GatewayClass, and every Gateway: the class
// decides which are ours.
func (c *Controller) gatewayClassChanged(obj any) {
	c.classes.classChanged(obj)
	c.gateways.queueAll()
}

// trimGatewayObject drops the managed fields of Gateway API objects.
func trimGatewayObject(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// enqueueGatewaysOf queues the Gateways of the routes that name a Service.
func (c *cluster) enqueueGatewaysOf(svcKey string, delay time.Duration) {
	if c.gwState() == nil {
		return
	}
	for _, o := range c.gwState().routesByIndex(routeBackendIndex, svcKey) {
		ks, _ := routeParents(o)
		for _, k := range ks {
			ns, name, _ := cache.SplitMetaNamespaceKey(k)
			c.queue.AddAfter(gatewayKey(ns, name), delay)
		}
	}
}

func (c *cluster) gatewayClasses() []*gatewayv1.GatewayClass {
	classes, _ := c.gwState().classes.List(labels.Everything())
	return classes
}

// referencedByNPLRoute reports whether a route (of any kind served) that
// names a Gateway of an npl GatewayClass sends requests to the Service.
func (c *cluster) referencedByNPLRoute(svc *corev1.Service) bool {
	if c.gwState() == nil {
		return false
	}
	classes := c.gatewayClasses()
	for _, o := range c.gwState().routesByIndex(routeBackendIndex, keyOf(svc)) {
		for _, k := range gateway.Gateways(o) {
			ns, name, _ := cache.SplitMetaNamespaceKey(k)
			if gw, err := c.gwState().gateways.Gateways(ns).Get(name); err == nil && gateway.Ours(gw, classes) {
				return true
			}
		}
	}
	return false
}
