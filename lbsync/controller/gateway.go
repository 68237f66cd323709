package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gatewaylisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/providers"
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

// missingSecretRetry is how soon a Gateway whose listener names a missing
// Secret is synced again.
const missingSecretRetry = 10 * time.Second

// forbiddenSecretRetry is how soon a Gateway whose listener names a Secret
// npl-lbsync may not read is synced again: the right to read it (chart
// value gatewayAPI.readTLSSecrets) may be granted without a restart.
const forbiddenSecretRetry = 60 * time.Second

// secretRetry returns how soon a Gateway is synced again to read its
// certificate Secrets again (npl-lbsync watches none): some are missing,
// or some it may not read; 0 when all were read.
func secretRetry(missing bool, forbidden []string) time.Duration {
	switch {
	case missing:
		return missingSecretRetry
	case len(forbidden) > 0:
		return forbiddenSecretRetry
	}
	return 0
}

// gatewayState is the Gateway API part of the controller, set by
// EnableGatewayAPI.
type gatewayState struct {
	client   gatewayclient.Interface
	factory  gatewayinformers.SharedInformerFactory
	classes  gatewaylisters.GatewayClassLister
	gateways gatewaylisters.GatewayLister
	// routeKinds are the route kinds served, HTTPRoute first.
	routeKinds []routeKind
	grants     gatewaylisters.ReferenceGrantLister
	// cancel stops the informers of a state ServeGatewayAPI started.
	cancel    context.CancelFunc
	namespace cache.Indexer
}

// EnableGatewayAPI makes the controller serve the Gateways of npl's
// GatewayClasses with client, with their HTTPRoutes and the routes of
// routeKinds (of inputs.GatewayRouteKindsServed); call it before Start, once the
// Gateway API CRDs are known to be served (inputs.GatewayAPIServed).
func (c *Controller) EnableGatewayAPI(client gatewayclient.Interface, routeKinds ...string) {
	g, synced := c.newGatewayState(client, routeKinds)
	c.synced = append(c.synced, synced...)
	c.gwp.Store(g)
}

// ServeGatewayAPI makes a started controller serve the Gateway API with
// the route kinds given, HTTPRoute always: when the CRDs appear after the
// start (WatchGatewayCRDs). It starts new informers, waits for their
// caches, then replaces the Gateway API part, if any, stops its informers
// and queues every GatewayClass and Gateway.
func (c *Controller) ServeGatewayAPI(ctx context.Context, client gatewayclient.Interface, routeKinds ...string) error {
	g, synced := c.newGatewayState(client, routeKinds)
	gctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	c.factory.Start(ctx.Done()) // the Namespace informer, new unless the Gateway API was served before
	g.factory.Start(gctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		cancel()
		return fmt.Errorf("wait for the Gateway API informer caches: %w", ctx.Err())
	}
	if old := c.gwp.Swap(g); old != nil && old.cancel != nil {
		old.cancel()
	}
	c.queueAllGateways()
	return nil
}

// GatewayRouteKinds returns the route kinds served, HTTPRoute first; none
// when the Gateway API is not served.
func (c *Controller) GatewayRouteKinds() []string {
	g := c.gwState()
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.routeKinds))
	for _, rk := range g.routeKinds {
		out = append(out, rk.kind)
	}
	return out
}

// gwState returns the Gateway API part, nil when it is not served.
func (c *cluster) gwState() *gatewayState { return c.gwp.Load() }

// newGatewayState makes the informers of the Gateway API and the route
// kinds given (HTTPRoute always), with their handlers, and returns them
// with what tells that their caches are synced.
func (c *Controller) newGatewayState(client gatewayclient.Interface, routeKinds []string) (*gatewayState, []cache.InformerSynced) {
	factory := gatewayinformers.NewSharedInformerFactoryWithOptions(client, 0, gatewayinformers.WithTransform(trimGatewayObject))
	v1 := factory.Gateway().V1()
	g := &gatewayState{client: client, factory: factory}
	classInf, gwInf, grantInf := v1.GatewayClasses(), v1.Gateways(), v1.ReferenceGrants()
	nsInf := c.factory.Core().V1().Namespaces()
	for _, kind := range append([]string{gateway.KindHTTPRoute}, routeKinds...) {
		if kind == gateway.KindHTTPRoute && len(g.routeKinds) > 0 {
			continue
		}
		g.routeKinds = append(g.routeKinds, newRouteKind(kind, factory, client))
	}
	g.classes, g.gateways, g.grants = classInf.Lister(), gwInf.Lister(), grantInf.Lister()
	g.namespace = nsInf.Informer().GetIndexer()

	_, _ = classInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.gatewayClassChanged,
		UpdateFunc: func(_, obj any) { c.gatewayClassChanged(obj) },
		DeleteFunc: c.gatewayClassChanged,
	})
	_, _ = gwInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueGateway,
		UpdateFunc: c.gatewayUpdated,
		DeleteFunc: c.enqueueGateway,
	})
	synced := []cache.InformerSynced{classInf.Informer().HasSynced, gwInf.Informer().HasSynced,
		grantInf.Informer().HasSynced, nsInf.Informer().HasSynced}
	for _, rk := range g.routeKinds {
		_, _ = rk.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.routeChanged(nil, obj) },
			UpdateFunc: c.routeChanged,
			DeleteFunc: func(obj any) { c.routeChanged(obj, nil) },
		})
		synced = append(synced, rk.informer.HasSynced)
	}
	all := func(any) { c.enqueueAllGateways() }
	_, _ = grantInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: all, UpdateFunc: func(_, obj any) { all(obj) }, DeleteFunc: all,
	})
	c.nsHandler.Do(func() {
		_, _ = nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) {
				o, ok1 := old.(*corev1.Namespace)
				n, ok2 := obj.(*corev1.Namespace)
				if ok1 && ok2 && !labels.Equals(o.Labels, n.Labels) {
					c.enqueueAllGateways()
				}
			},
		})
	})
	return g, synced
}

// trimGatewayObject drops the managed fields of Gateway API objects.
func trimGatewayObject(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

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

func (c *Controller) gatewayClassChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if gc, ok := obj.(*gatewayv1.GatewayClass); ok {
		c.queue.Add(gatewayClassKey(gc.Name))
	}
	c.enqueueAllGateways()
}

func (c *Controller) enqueueGateway(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if gw, ok := obj.(*gatewayv1.Gateway); ok {
		c.queue.Add(gatewayKey(gw.Namespace, gw.Name))
	}
}

// gatewayUpdated queues a Gateway whose spec or metadata changed; a write
// of its status (ours) needs no sync.
func (c *Controller) gatewayUpdated(oldObj, obj any) {
	old, ok1 := oldObj.(*gatewayv1.Gateway)
	cur, ok2 := obj.(*gatewayv1.Gateway)
	if ok1 && ok2 && old.Generation == cur.Generation && apiequality.Semantic.DeepEqual(old.Labels, cur.Labels) &&
		apiequality.Semantic.DeepEqual(old.DeletionTimestamp, cur.DeletionTimestamp) {
		return
	}
	c.enqueueGateway(obj)
}

// enqueueAllGateways queues every Gateway and returns their keys.
func (c *Controller) enqueueAllGateways() []queueKey {
	if c.gwState() == nil {
		return nil
	}
	gws, _ := c.gwState().gateways.List(labels.Everything())
	keys := make([]queueKey, 0, len(gws))
	for _, gw := range gws {
		keys = append(keys, gatewayKey(gw.Namespace, gw.Name))
	}
	return c.queueKeys(keys)
}

// routeChanged queues the Gateways a route names or named, and the
// Services it stopped naming, whose opt-in may have to go.
func (c *Controller) routeChanged(oldObj, obj any) {
	if d, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
		oldObj = d.Obj
	}
	if gateway.RouteKind(oldObj) == "" {
		oldObj = nil
	}
	if gateway.RouteKind(obj) == "" {
		obj = nil
	}
	old, _ := oldObj.(metav1.Object)
	cur, _ := obj.(metav1.Object)
	if old != nil && cur != nil && old.GetGeneration() == cur.GetGeneration() && apiequality.Semantic.DeepEqual(old.GetLabels(), cur.GetLabels()) {
		return // a status write: nothing to build
	}
	keys := map[string]bool{}
	for _, rt := range []any{oldObj, obj} {
		ks, _ := routeParents(rt)
		for _, k := range ks {
			keys[k] = true
		}
	}
	for k := range keys {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		c.queue.Add(gatewayKey(ns, name))
	}
	if old != nil {
		now := gateway.Backends(obj)
		for _, b := range gateway.Backends(oldObj) {
			if !slices.Contains(now, b) {
				c.queue.Add(serviceKey(b.Namespace, b.Name))
			}
		}
	}
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

// queueAllGateways queues every GatewayClass and Gateway and returns
// their keys.
func (c *Controller) queueAllGateways() []queueKey {
	if c.gwState() == nil {
		return nil
	}
	var keys []queueKey
	for _, gc := range c.gatewayClasses() {
		keys = append(keys, gatewayClassKey(gc.Name))
	}
	return append(c.queueKeys(keys), c.enqueueAllGateways()...)
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

// syncGatewayClass writes the status of one of npl's GatewayClasses.
func (c *Controller) syncGatewayClass(ctx context.Context, key queueKey) syncResult {
	return retryOn(c.writeGatewayClassStatus(ctx, key))
}

// writeGatewayClassStatus writes the status of the GatewayClass of key
// when it is npl's and its status changes.
func (c *Controller) writeGatewayClassStatus(ctx context.Context, key queueKey) error {
	if c.gwState() == nil {
		return nil // ServeGatewayAPI's informers sync; it queues every class once they have
	}
	gc, err := c.gwState().classes.Get(key.name)
	if err != nil || !gateway.ClassOurs(gc) {
		return nil
	}
	want := gateway.ClassStatus(gc, c.settings.GatewayFeatures)
	want.Conditions = gateway.MergeConditions(gc.Status.Conditions, want.Conditions, metav1.Now(), false)
	if apiequality.Semantic.DeepEqual(gc.Status, want) {
		return nil
	}
	patch, err := statusPatch(want, "supportedFeatures")
	if err != nil {
		return err
	}
	_, err = c.gwState().client.GatewayV1().GatewayClasses().Patch(ctx, gc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch gatewayclass %s status: %w", gc.Name, err)
	}
	return nil
}

// statusPatch is a merge patch that sets status to st, with the listed
// fields null (removed) when st omits them.
func statusPatch(st any, nullable ...string) ([]byte, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("marshal status: %w", err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("unmarshal status: %w", err)
	}
	for _, f := range nullable {
		if _, ok := m[f]; !ok {
			m[f] = nil
		}
	}
	return json.Marshal(map[string]any{"status": m})
}

// syncGateway makes the load balancer of one Gateway match it and its
// routes, and writes the statuses of the Gateway and of the routes'
// parentRefs to it.
func (c *Controller) syncGateway(ctx context.Context, key queueKey) syncResult {
	if c.gwState() == nil {
		return synced() // ServeGatewayAPI's informers sync; it queues every Gateway once they have
	}
	name := lbmodel.GatewayLoadBalancerName(c.settings.ClusterName, key.namespace, key.name)
	gw, err := c.gwState().gateways.Gateways(key.namespace).Get(key.name)
	if err != nil || !gateway.Ours(gw, c.gatewayClasses()) || gw.DeletionTimestamp != nil {
		// Gone, or not ours (any more): no load balancer, and no status of
		// ours on its routes.
		had := c.applier.hasApplied(key)
		if had || err != nil {
			if derr := c.applier.delete(ctx, name, lbmodel.L7); derr != nil {
				return retryOn(fmt.Errorf("delete load balancer %s: %w", name, derr))
			}
			if had {
				klog.FromContext(ctx).Info("Deleted the load balancer of a Gateway", "gateway", key.namespace+"/"+key.name, "lb", name)
			}
		}
		c.forget(key)
		c.mu.Lock()
		delete(c.forbiddenTold, key)
		c.mu.Unlock()
		return retryOn(c.writeRouteStatuses(ctx, key, nil))
	}

	in, err := c.gatewayInput(ctx, gw)
	if err != nil {
		return retryOn(err)
	}
	res := gateway.Build(in)
	for _, e := range res.Report.Errors {
		c.recorder.Event(gw, corev1.EventTypeWarning, "InvalidGateway", e)
	}
	for _, w := range res.Report.Warnings {
		c.recorder.Event(gw, corev1.EventTypeWarning, "GatewayWarning", w)
	}
	backends := make([]*corev1.Service, 0, len(res.Backends))
	for _, ref := range res.Backends {
		backends = append(backends, c.store.Service(ref.Namespace, ref.Name))
	}
	if err := c.optIn(ctx, backends); err != nil {
		return retryOn(err)
	}

	if d := secretRetry(res.MissingSecrets, in.ForbiddenSecrets); d > 0 {
		// Secrets are not watched (npl-lbsync caches none): look again.
		c.queue.AddAfter(key, d)
	}
	var prog gateway.Programmed
	var applied syncResult
	if res.LB == nil {
		// Nothing to serve: no load balancer, deleted once.
		had := c.applier.hasApplied(key)
		c.mu.Lock()
		gone := c.gatewayGone[key]
		c.mu.Unlock()
		if had || !gone {
			if err := c.applier.delete(ctx, name, lbmodel.L7); err != nil {
				applied = retryOn(fmt.Errorf("delete load balancer %s: %w", name, err))
			} else {
				if had {
					c.recorder.Eventf(gw, corev1.EventTypeNormal, "Deleted", "Load balancer %s deleted: nothing to serve", name)
				}
				c.forget(key)
				c.mu.Lock()
				c.gatewayGone[key] = true
				c.mu.Unlock()
			}
		}
	} else {
		prog, applied = c.applyGateway(ctx, key, gw, res)
	}
	// The statuses are written after the apply, also when it failed (the
	// routes' do not depend on it; the Gateway's says why): a route that
	// reads Accepted is on the load balancer once the Gateway reads
	// Programmed, so waiting for both is waiting for its traffic.
	serr := errors.Join(c.writeRouteStatuses(ctx, key, res.Routes), c.writeGatewayStatus(ctx, gw, res, prog))
	if applied.state == syncRetry {
		if serr != nil {
			klog.FromContext(ctx).Error(serr, "Write statuses", "gateway", keyOf(gw))
		}
		return applied // the retry may succeed
	}
	if serr != nil {
		return retryOn(serr)
	}
	return applied
}

// applyGateway applies a Gateway's model through the one apply path and
// returns what the Gateway's Programmed condition says.
func (c *Controller) applyGateway(ctx context.Context, key queueKey, gw *gatewayv1.Gateway, res gateway.Result) (gateway.Programmed, syncResult) {
	var prog gateway.Programmed
	told := false
	_, applied := c.applier.apply(ctx, model{
		key: key, lb: res.LB, report: res.Report, objects: []runtime.Object{gw},
		needsStatus: len(gw.Status.Addresses) == 0, syncedEvents: true,
		setStatus: func(_ context.Context, status providers.Status) error {
			prog, told = gateway.Programmed{OK: true, VIPs: status.VIPs}, true
			c.mu.Lock()
			c.gatewayVIPs[key] = status.VIPs
			delete(c.gatewayGone, key)
			c.mu.Unlock()
			return nil
		},
		setFailed: func(_ context.Context, f failure) error {
			prog, told = programmedAfter(f), true
			return nil
		},
	})
	if applied.state != syncRetry && !told {
		// Unchanged and applied before: the VIPs are those last learnt.
		c.mu.Lock()
		vips := c.gatewayVIPs[key]
		c.mu.Unlock()
		prog = gateway.Programmed{OK: true, VIPs: vips}
	}
	return prog, applied
}

// programmedAfter is the Programmed condition of a Gateway whose model
// was not applied: Invalid when the model is at fault (retrying it cannot
// help), else Pending (the provider failed; the retry may program it), with
// the message.
func programmedAfter(f failure) gateway.Programmed {
	if f.refused {
		return gateway.Programmed{Reason: string(gatewayv1.GatewayReasonInvalid), Message: f.reason + ": " + f.message}
	}
	return gateway.Programmed{Reason: string(gatewayv1.GatewayReasonPending), Message: f.message}
}

// writeGatewayStatus writes the Gateway's status when it changes.
func (c *Controller) writeGatewayStatus(ctx context.Context, gw *gatewayv1.Gateway, res gateway.Result, prog gateway.Programmed) error {
	want := gateway.MergeGatewayStatus(gw.Status, gateway.GatewayStatus(gw, res, prog), metav1.Now())
	want.AttachedListenerSets = gw.Status.AttachedListenerSets
	if apiequality.Semantic.DeepEqual(gw.Status, want) {
		return nil
	}
	patch, err := statusPatch(want, "addresses")
	if err != nil {
		return err
	}
	_, err = c.gwState().client.GatewayV1().Gateways(gw.Namespace).Patch(ctx, gw.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch gateway %s/%s status: %w", gw.Namespace, gw.Name, err)
	}
	return nil
}

// writeRouteStatuses sets, in every route that names the Gateway of key or
// holds an entry of ours for it, the parent statuses of results (none
// when the Gateway is gone or not ours). A conflict fails the sync, which
// is retried.
func (c *Controller) writeRouteStatuses(ctx context.Context, key queueKey, results []gateway.RouteResult) error {
	objs := c.gwState().routesByIndex(routeParentIndex, key.namespace+"/"+key.name)
	now := metav1.Now()
	// A Gateway's first sync writes the status of every route: a few
	// writes at a time rather than one after another, so that many routes
	// do not hold back the apply (the client's rate limit still applies).
	var g errgroup.Group
	g.SetLimit(statusWriters)
	for _, o := range objs {
		rt, ok := o.(metav1.Object)
		rk := c.gwState().routeKindOf(o)
		if !ok || rk == nil {
			continue
		}
		var desired []gatewayv1.RouteParentStatus
		if i := slices.IndexFunc(results, func(r gateway.RouteResult) bool {
			return r.Kind == rk.kind && r.Namespace == rt.GetNamespace() && r.Name == rt.GetName()
		}); i >= 0 {
			desired = results[i].Parents
		}
		have := gateway.StatusParents(o)
		parents := gateway.RouteParents(have, key.namespace, key.name, rt.GetNamespace(), desired, now)
		if apiequality.Semantic.DeepEqual(have, parents) || (len(parents) == 0 && len(have) == 0) {
			continue
		}
		upd := gateway.WithStatusParents(o, parents)
		g.Go(func() error {
			if err := rk.updateStatus(ctx, upd); err != nil {
				return fmt.Errorf("update %s %s/%s status: %w", strings.ToLower(rk.kind), rt.GetNamespace(), rt.GetName(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// gatewayInput gathers what Build reads for gw from the caches (with
// inputs.Store.GatewayInput), and its certificate Secrets from the API; the
// Secrets npl-lbsync may not read are told in a Warning Event when they
// change (tellForbidden).
func (c *Controller) gatewayInput(ctx context.Context, gw *gatewayv1.Gateway) (gateway.Input, error) {
	g := c.gwState()
	src := inputs.GatewaySources{
		Routes:     g.routesByIndex(routeParentIndex, gw.Namespace+"/"+gw.Name),
		Namespaces: inputs.Typed[*corev1.Namespace](g.namespace.List()),
	}
	src.ReferenceGrants, _ = g.grants.List(labels.Everything())
	set := inputs.Settings{ClusterName: c.settings.ClusterName, ServiceType: c.settings.ServiceType, Family: c.settings.Family}
	in, err := c.store.GatewayInput(ctx, set, gw, src, inputs.APISecrets(c.client))
	in.Checker = c.checker
	if err == nil {
		c.tellForbidden(gw, in.ForbiddenSecrets)
	}
	return in, err
}

// tellForbidden raises a Warning Event for each TLS Secret of gw that
// npl-lbsync may not read when that set differs from the one last told:
// the Gateway is polled while it names one (forbiddenSecretRetry), and
// one Event per poll would flood its Events.
func (c *Controller) tellForbidden(gw *gatewayv1.Gateway, forbidden []string) {
	key := gatewayKey(gw.Namespace, gw.Name)
	now := strings.Join(forbidden, ",")
	c.mu.Lock()
	told := c.forbiddenTold[key]
	if now == "" {
		delete(c.forbiddenTold, key)
	} else {
		c.forbiddenTold[key] = now
	}
	c.mu.Unlock()
	if now == told {
		return
	}
	for _, secret := range forbidden {
		c.recorder.Eventf(gw, corev1.EventTypeWarning, "TLSSecretForbidden",
			"Cannot read TLS Secret %s: npl-lbsync may not read Secrets", secret)
	}
}

// claimedGatewayNames returns the names of the load balancers of the
// Gateways we serve.
func (c *Controller) claimedGatewayNames() map[string]bool {
	names := map[string]bool{}
	if c.gwState() == nil {
		return names
	}
	classes := c.gatewayClasses()
	gws, _ := c.gwState().gateways.List(labels.Everything())
	for _, gw := range gws {
		if gateway.Ours(gw, classes) && gw.DeletionTimestamp == nil {
			names[lbmodel.GatewayLoadBalancerName(c.settings.ClusterName, gw.Namespace, gw.Name)] = true
		}
	}
	return names
}
