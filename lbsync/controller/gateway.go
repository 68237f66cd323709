package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy"
	"github.com/nodeportlocal/npl/providers"
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

// gatewayReconciler syncs the Gateways of npl's GatewayClasses: one load
// balancer per Gateway, built from the Gateway and its routes, and the
// statuses of the Gateway and of the routes' entries for it.
type gatewayReconciler struct {
	*cluster
	applier *applier
	// checker is the provider's check of a Gateway's listeners and rules
	// (nil: it serves them all): the Gateway builder leaves out the
	// listeners and routes it refuses.
	checker providers.ModelChecker
	// policyCaps is what the provider expresses of a pool's policy: a
	// BackendTLSPolicy it cannot verify is not accepted.
	policyCaps *lbmodel.PolicyCapabilities

	mu sync.Mutex
	// vips holds the VIPs last learnt per Gateway, for its status when an
	// unchanged model is not applied again.
	vips map[queueKey][]string
	// gone records the Gateways whose load balancer was deleted because
	// they have nothing to serve, so it is deleted once.
	gone map[queueKey]bool
	// forbiddenTold holds, per Gateway, the TLS Secrets it names that
	// npl-lbsync may not read, as last told in a Warning Event, so that
	// the Event fires when they change, not on every poll.
	forbiddenTold map[queueKey]string
	// routesTold holds, per Gateway, the Events last told its routes
	// (tellRoutes), so that they fire when they change, not on every sync.
	routesTold map[queueKey]string
}

func newGatewayReconciler(cl *cluster, a *applier, checker providers.ModelChecker, caps lbmodel.PolicyCapabilities) *gatewayReconciler {
	return &gatewayReconciler{cluster: cl, applier: a, checker: checker, policyCaps: &caps,
		vips: map[queueKey][]string{}, gone: map[queueKey]bool{}, forbiddenTold: map[queueKey]string{}, routesTold: map[queueKey]string{}}
}

func (r *gatewayReconciler) kinds() []kind { return []kind{kindGateway} }

func (r *gatewayReconciler) gatewayChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if gw, ok := obj.(*gatewayv1.Gateway); ok {
		r.queue.Add(gatewayKey(gw.Namespace, gw.Name))
		// Whether it exists and is ours is in their status.
		r.queuePoliciesOf(lbpolicy.GatewayTarget(gw.Namespace, gw.Name))
	}
}

// gatewayUpdated queues a Gateway whose spec or metadata changed; a write
// of its status (ours) needs no sync.
func (r *gatewayReconciler) gatewayUpdated(oldObj, obj any) {
	old, ok1 := oldObj.(*gatewayv1.Gateway)
	cur, ok2 := obj.(*gatewayv1.Gateway)
	if ok1 && ok2 && old.Generation == cur.Generation && apiequality.Semantic.DeepEqual(old.Labels, cur.Labels) &&
		apiequality.Semantic.DeepEqual(old.DeletionTimestamp, cur.DeletionTimestamp) {
		return
	}
	r.gatewayChanged(obj)
}

// keys returns the key of every Gateway.
func (r *gatewayReconciler) keys() []queueKey {
	if r.gwState() == nil {
		return nil
	}
	gws, _ := r.gwState().gateways.List(labels.Everything())
	return keysOf(gws, gatewayKey)
}

// queueAll queues every Gateway: what a GatewayClass, a ReferenceGrant or
// a Namespace's labels allow changed.
func (r *gatewayReconciler) queueAll() { r.queueKeys(r.keys()) }

// routeChanged queues the Gateways a route names or named, and the
// Services it stopped naming, whose opt-in may have to go.
func (r *gatewayReconciler) routeChanged(oldObj, obj any) {
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
		r.queue.Add(gatewayKey(ns, name))
	}
	if old != nil {
		now := gateway.Backends(obj)
		for _, b := range gateway.Backends(oldObj) {
			if !slices.Contains(now, b) {
				r.queue.Add(serviceKey(b.Namespace, b.Name))
			}
		}
	}
}

// claimed adds the names of the load balancers of the Gateways we serve
// to names.
func (r *gatewayReconciler) claimed(names map[string]bool) {
	if r.gwState() == nil {
		return
	}
	classes := r.gatewayClasses()
	gws, _ := r.gwState().gateways.List(labels.Everything())
	for _, gw := range gws {
		if gateway.Ours(gw, classes) && gw.DeletionTimestamp == nil {
			names[lbmodel.GatewayLoadBalancerName(r.settings.ClusterName, gw.Namespace, gw.Name)] = true
		}
	}
}

// sync makes the load balancer of one Gateway match it and its
// routes, and writes the statuses of the Gateway and of the routes'
// parentRefs to it.
func (r *gatewayReconciler) sync(ctx context.Context, key queueKey) syncResult {
	if r.gwState() == nil {
		return synced() // ServeGatewayAPI's informers sync; it queues every Gateway once they have
	}
	gw, err := r.gwState().gateways.Gateways(key.namespace).Get(key.name)
	if err == nil {
		if last, ok := pending(&r.writes, gw); ok {
			gw = gw.DeepCopy()
			gw.Status = last.Status // the spec stays the cache's: never older than its events
		}
	}
	if err != nil || !gateway.Ours(gw, r.gatewayClasses()) || gw.DeletionTimestamp != nil {
		return retryOn(r.release(ctx, key, err != nil))
	}

	in, err := r.input(ctx, gw)
	if err != nil {
		return retryOn(err)
	}
	res := gateway.Build(in)
	own := lbpolicy.GatewayTarget(gw.Namespace, gw.Name)
	r.attachPolicies(res.LB, &own, res.Report.PoolBackends)
	for _, e := range res.Report.Errors {
		r.recorder.Event(gw, corev1.EventTypeWarning, "InvalidGateway", e)
	}
	r.tellRoutes(key, &in, res.RouteEvents)
	for _, w := range res.Report.Warnings {
		r.recorder.Event(gw, corev1.EventTypeWarning, "GatewayWarning", w)
	}
	backends := make([]*corev1.Service, 0, len(res.Backends))
	for _, ref := range res.Backends {
		backends = append(backends, r.store.Service(ref.Namespace, ref.Name))
	}
	if err := r.optIn(ctx, backends); err != nil {
		return retryOn(err)
	}

	if d := secretRetry(res.MissingSecrets, in.ForbiddenSecrets); d > 0 {
		// Secrets are not watched (npl-lbsync caches none): look again.
		r.queue.AddAfter(key, d)
	}
	var prog gateway.Programmed
	var applied syncResult
	if res.LB == nil {
		applied = retryOn(r.deleteUnserved(ctx, key, gw))
	} else {
		prog, applied = r.apply(ctx, key, gw, res)
	}
	// The statuses are written after the apply, also when it failed (the
	// routes' do not depend on it; the Gateway's says why): a route that
	// reads Accepted is on the load balancer once the Gateway reads
	// Programmed, so waiting for both is waiting for its traffic.
	serr := errors.Join(r.writeRouteStatuses(ctx, key, res.Routes), r.writeBackendTLSStatuses(ctx, key, res.BackendTLSPolicies),
		r.writeTrafficPolicyStatuses(ctx, key, res.TrafficPolicies),
		r.writeStatus(ctx, gw, res, prog))
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

// release deletes the load balancer of a Gateway that is gone (missing
// from the cache: it may have had one before a restart) or not ours (any
// more) when it had one, and removes our entries for it from the statuses
// of its routes, BackendTLSPolicies and XBackendTrafficPolicies.
func (r *gatewayReconciler) release(ctx context.Context, key queueKey, missing bool) error {
	name := lbmodel.GatewayLoadBalancerName(r.settings.ClusterName, key.namespace, key.name)
	had := r.applier.hasApplied(key)
	if had || missing {
		if err := r.applier.delete(ctx, name, lbmodel.L7); err != nil {
			return fmt.Errorf("delete load balancer %s: %w", name, err)
		}
		if had {
			klog.FromContext(ctx).Info("Deleted the load balancer of a Gateway", "gateway", key.namespace+"/"+key.name, "lb", name)
		}
	}
	r.forget(key)
	r.mu.Lock()
	delete(r.forbiddenTold, key)
	delete(r.routesTold, key)
	r.mu.Unlock()
	return errors.Join(r.writeRouteStatuses(ctx, key, nil), r.writeBackendTLSStatuses(ctx, key, nil),
		r.writeTrafficPolicyStatuses(ctx, key, nil))
}

// deleteUnserved deletes the load balancer of a Gateway that has nothing
// to serve, once.
func (r *gatewayReconciler) deleteUnserved(ctx context.Context, key queueKey, gw *gatewayv1.Gateway) error {
	had := r.applier.hasApplied(key)
	r.mu.Lock()
	gone := r.gone[key]
	r.mu.Unlock()
	if !had && gone {
		return nil
	}
	name := lbmodel.GatewayLoadBalancerName(r.settings.ClusterName, key.namespace, key.name)
	if err := r.applier.delete(ctx, name, lbmodel.L7); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	if had {
		r.recorder.Eventf(gw, corev1.EventTypeNormal, "Deleted", "Load balancer %s deleted: nothing to serve", name)
	}
	r.forget(key)
	r.mu.Lock()
	r.gone[key] = true
	r.mu.Unlock()
	return nil
}

// forget drops what is kept of a Gateway's load balancer, here and in the
// applier.
func (r *gatewayReconciler) forget(key queueKey) {
	r.applier.forget(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.vips, key)
	delete(r.gone, key)
}

// apply applies a Gateway's model through the one apply path and returns
// what the Gateway's Programmed condition says.
func (r *gatewayReconciler) apply(ctx context.Context, key queueKey, gw *gatewayv1.Gateway, res gateway.Result) (gateway.Programmed, syncResult) {
	var prog gateway.Programmed
	told := false
	_, applied := r.applier.apply(ctx, model{
		key: key, lb: res.LB, report: res.Report, objects: []runtime.Object{gw},
		needsStatus: len(gw.Status.Addresses) == 0, syncedEvents: true,
		setStatus: func(_ context.Context, status providers.Status) error {
			prog, told = gateway.Programmed{OK: true, VIPs: status.VIPs}, true
			r.mu.Lock()
			r.vips[key] = status.VIPs
			delete(r.gone, key)
			r.mu.Unlock()
			return nil
		},
		setFailed: func(_ context.Context, f failure) error {
			prog, told = programmedAfter(f), true
			return nil
		},
	})
	if applied.state != syncRetry && !told {
		// Unchanged and applied before: the VIPs are those last learnt.
		r.mu.Lock()
		vips := r.vips[key]
		r.mu.Unlock()
		prog = gateway.Programmed{OK: true, VIPs: vips}
	}
	return prog, applied
}

// programmedAfter is the Programmed condition of a Gateway whose model
// was not applied: AddressNotUsable when it may not have the address it
// requests, Invalid when the model is otherwise at fault (retrying it
// cannot help), else Pending (the provider failed; the retry may program
// it), with the message.
func programmedAfter(f failure) gateway.Programmed {
	if f.reason == reasonVIPNotAllowed || f.reason == reasonVIPInUse {
		return gateway.Programmed{Reason: string(gatewayv1.GatewayReasonAddressNotUsable), Message: f.reason + ": " + f.message}
	}
	if f.refused {
		return gateway.Programmed{Reason: string(gatewayv1.GatewayReasonInvalid), Message: f.reason + ": " + f.message}
	}
	return gateway.Programmed{Reason: string(gatewayv1.GatewayReasonPending), Message: f.message}
}

// writeStatus writes the Gateway's status when it changes.
func (r *gatewayReconciler) writeStatus(ctx context.Context, gw *gatewayv1.Gateway, res gateway.Result, prog gateway.Programmed) error {
	want := gateway.MergeGatewayStatus(gw.Status, gateway.GatewayStatus(gw, res, prog), metav1.Now())
	want.AttachedListenerSets = gw.Status.AttachedListenerSets
	if apiequality.Semantic.DeepEqual(gw.Status, want) {
		return nil
	}
	patch, err := statusPatch(want, "addresses")
	if err != nil {
		return err
	}
	out, err := r.gwState().client.GatewayV1().Gateways(gw.Namespace).Patch(ctx, gw.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch gateway %s/%s status: %w", gw.Namespace, gw.Name, err)
	}
	r.writes.wrote(out)
	return nil
}

// writeRouteStatuses sets, in every route that names the Gateway of key or
// holds an entry of ours for it, the parent statuses of results (none
// when the Gateway is gone or not ours). A conflict fails the sync, which
// is retried.
func (r *gatewayReconciler) writeRouteStatuses(ctx context.Context, key queueKey, results []gateway.RouteResult) error {
	objs := r.gwState().routesByIndex(routeParentIndex, key.namespace+"/"+key.name)
	now := metav1.Now()
	// A Gateway's first sync writes the status of every route: a few
	// writes at a time rather than one after another, so that many routes
	// do not hold back the apply (the client's rate limit still applies).
	var g errgroup.Group
	g.SetLimit(statusWriters)
	for _, o := range objs {
		rt, ok := o.(metav1.Object)
		rk := r.gwState().routeKindOf(o)
		if !ok || rk == nil {
			continue
		}
		var desired []gatewayv1.RouteParentStatus
		if i := slices.IndexFunc(results, func(res gateway.RouteResult) bool {
			return res.Kind == rk.kind && res.Namespace == rt.GetNamespace() && res.Name == rt.GetName()
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

// input gathers what Build reads for gw from the caches (with
// inputs.Store.GatewayInput), its certificate Secrets from the API, and
// the CA ConfigMaps of its backends' BackendTLSPolicies and of its own
// client validation from their watches;
// the Secrets npl-lbsync may not read are told in a Warning Event when
// they change (tellForbidden).
func (r *gatewayReconciler) input(ctx context.Context, gw *gatewayv1.Gateway) (gateway.Input, error) {
	g := r.gwState()
	src := inputs.GatewaySources{
		Routes:     g.routesByIndex(routeParentIndex, gw.Namespace+"/"+gw.Name),
		Namespaces: inputs.Typed[*corev1.Namespace](g.namespace.List()),
	}
	src.ReferenceGrants, _ = g.grants.List(labels.Everything())
	if g.backendTLS != nil {
		src.BackendTLSPolicies, src.ConfigMaps = g.backendTLS.policiesOf(src.Routes), g.configMaps.get
	}
	if g.traffic != nil {
		src.TrafficPolicies = g.traffic.policiesOf(src.Routes)
	}
	src.FrontendConfigMaps = g.configMaps.get
	in, err := r.store.GatewayInput(ctx, r.inputSettings(), gw, src, inputs.APISecrets(r.client))
	in.Checker, in.PolicyCapabilities = r.checker, r.policyCaps
	if err == nil {
		r.tellForbidden(gw, in.ForbiddenSecrets)
	}
	return in, err
}

// tellForbidden raises a Warning Event for each TLS Secret of gw that
// npl-lbsync may not read when that set differs from the one last told:
// the Gateway is polled while it names one (forbiddenSecretRetry), and
// one Event per poll would flood its Events.
func (r *gatewayReconciler) tellForbidden(gw *gatewayv1.Gateway, forbidden []string) {
	if !r.retell(r.forbiddenTold, gatewayKey(gw.Namespace, gw.Name), strings.Join(forbidden, ",")) {
		return
	}
	for _, secret := range forbidden {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "TLSSecretForbidden",
			"Cannot read TLS Secret %s: npl-lbsync may not read Secrets", secret)
	}
}

// tellRoutes sends the routes of a Gateway's build their Warning Events
// (a host another namespace owns, a route too large) when they differ
// from those last told for the Gateway: a Gateway syncs on every change of
// its backends' Pods.
func (r *gatewayReconciler) tellRoutes(key queueKey, in *gateway.Input, events []gateway.RouteEvent) {
	var b strings.Builder
	for _, ev := range events {
		fmt.Fprintf(&b, "%s %s/%s %s %s\n", ev.Kind, ev.Namespace, ev.Name, ev.Reason, ev.Message)
	}
	if !r.retell(r.routesTold, key, b.String()) {
		return
	}
	for _, ev := range events {
		if obj := in.Route(ev.Kind, ev.Namespace, ev.Name); obj != nil {
			r.recorder.Event(obj, corev1.EventTypeWarning, ev.Reason, ev.Message)
		}
	}
}

// retell records now as what key was last told in told ("" forgets it)
// and reports whether it differs from what was told before: Events fire
// when what they say changes, not on every sync.
func (r *gatewayReconciler) retell(told map[queueKey]string, key queueKey, now string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := told[key]
	if now == "" {
		delete(told, key)
	} else {
		told[key] = now
	}
	return now != before
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
