package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/providers"
)

// ingressReconciler syncs the Ingresses of npl's IngressClasses, each on a
// load balancer of its own or, with IngressSharedVIP, all on the shared
// one, whose key it syncs too. What it knows of their load balancers is
// the applier's.
type ingressReconciler struct {
	*cluster
	applier *applier
	lister  networkinglisters.IngressLister
	// sharedMu serialises the syncs of the shared load balancer, which any
	// Ingress's key may trigger.
	sharedMu sync.Mutex
}

func (r *ingressReconciler) kinds() []kind { return []kind{kindIngress, kindSharedIngress} }

func (r *ingressReconciler) ingressChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		r.queue.Add(ingressKey(ing.Namespace, ing.Name))
	}
}

// ingressUpdated queues the Ingress and the Services it stopped referencing,
// whose opt-in may have to go.
func (r *ingressReconciler) ingressUpdated(oldObj, obj any) {
	r.ingressChanged(obj)
	old, ok1 := oldObj.(*networkingv1.Ingress)
	cur, ok2 := obj.(*networkingv1.Ingress)
	if !ok1 || !ok2 {
		return
	}
	now := ingress.Backends(cur)
	for _, b := range ingress.Backends(old) {
		if !slices.Contains(now, b) {
			r.queue.Add(serviceKey(b.Namespace, b.Name))
		}
	}
}

func (r *ingressReconciler) ingressDeleted(obj any) {
	r.ingressChanged(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		for _, b := range ingress.Backends(ing) {
			r.queue.Add(serviceKey(b.Namespace, b.Name))
		}
	}
}

// classChanged queues every Ingress: an IngressClass decides which are ours.
func (r *ingressReconciler) classChanged() { r.queueKeys(r.keys()) }

// keys returns the key of every Ingress.
func (r *ingressReconciler) keys() []queueKey {
	ings, _ := r.lister.List(labels.Everything())
	return keysOf(ings, ingressKey)
}

// claimed adds the names of the L7 load balancers that an Ingress we serve
// (or still have to clean up) owns to names.
func (r *ingressReconciler) claimed(names map[string]bool) {
	ings, _ := r.lister.List(labels.Everything())
	classes := r.ingressClasses()
	for _, ing := range ings {
		if r.ours(ing, classes) || r.releasable(ing) {
			names[r.lbName(ing)] = true
		}
	}
}

// enqueueIngressesOf queues the Ingresses that reference a Service.
func (c *cluster) enqueueIngressesOf(svcKey string, delay time.Duration) {
	for _, ing := range c.store.IngressesOf(svcKey) {
		c.queue.AddAfter(ingressKey(ing.Namespace, ing.Name), delay)
	}
}

func (c *cluster) ingressClasses() []*networkingv1.IngressClass { return c.store.Classes() }

// referencedByNPLIngress reports whether an Ingress of any npl IngressClass
// (ours or another installation's) sends requests to the Service: only then
// may nobody remove its opt-in.
func (c *cluster) referencedByNPLIngress(svc *corev1.Service) bool {
	classes := c.ingressClasses()
	return slices.ContainsFunc(c.store.IngressesOf(keyOf(svc)), func(ing *networkingv1.Ingress) bool {
		return ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, ingress.Config{})
	})
}

// ours reports whether we serve ing now.
func (r *ingressReconciler) ours(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass) bool {
	return ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, ingress.Config{IngressClass: r.settings.IngressClass})
}

// releasable reports whether we hold (or may hold) a load balancer for ing
// that we must clean up.
func (r *ingressReconciler) releasable(ing *networkingv1.Ingress) bool {
	return claim.Releasable(ing, r.settings.ClusterName)
}

func (r *ingressReconciler) lbName(ing *networkingv1.Ingress) string {
	return ingress.LoadBalancerName(r.settings.ClusterName, ing, r.settings.IngressSharedVIP, r.settings.IngressClass)
}

// sync makes the load balancer of one Ingress, or the shared one, match
// the Ingresses.
func (r *ingressReconciler) sync(ctx context.Context, key queueKey) syncResult {
	if key == sharedIngressKey {
		return r.syncSharedLB(ctx)
	}
	ing, err := r.lister.Ingresses(key.namespace).Get(key.name)
	if err == nil {
		if last, ok := pending(&r.writes, ing); ok {
			ing = ing.DeepCopy()
			ing.Status = last.Status // the spec stays the cache's: never older than its events
		}
	}
	if err != nil {
		r.forget(key)
		if r.settings.IngressSharedVIP {
			return r.syncSharedLB(ctx)
		}
		return synced()
	}
	if r.settings.IngressSharedVIP {
		return r.syncOnShared(ctx, key, ing)
	}
	if r.ours(ing, r.ingressClasses()) {
		return r.ensure(ctx, key, ing)
	}
	if r.releasable(ing) {
		return retryOn(r.release(ctx, key, ing))
	}
	r.forget(key)
	return synced()
}

// forget drops what the applier keeps of key's load balancer.
func (r *ingressReconciler) forget(key queueKey) { r.applier.forget(key) }

// syncOnShared handles one Ingress when all Ingresses of our class share
// a VIP: it claims or releases the Ingress and syncs the shared load
// balancer, which holds the rules of every Ingress we serve.
func (r *ingressReconciler) syncOnShared(ctx context.Context, key queueKey, ing *networkingv1.Ingress) syncResult {
	ours := r.ours(ing, r.ingressClasses())
	if ours {
		if err := r.patchIngress(ctx, ing, claim.ClaimPatch(ing, r.settings.ClusterName, false)); err != nil {
			return retryOn(err)
		}
	}
	if res := r.syncSharedLB(ctx); res.state == syncRetry || ours || !r.releasable(ing) {
		return res
	}
	// It left the shared load balancer (built without it just above).
	return retryOn(r.unclaim(ctx, key, ing))
}

// syncSharedLB makes the shared load balancer hold the rules of every
// Ingress we serve, and deletes it when there is none.
func (r *ingressReconciler) syncSharedLB(ctx context.Context) syncResult {
	r.sharedMu.Lock()
	defer r.sharedMu.Unlock()
	all, err := r.lister.List(labels.Everything())
	if err != nil {
		return retryOn(err)
	}
	classes := r.ingressClasses()
	var ings []*networkingv1.Ingress
	for _, ing := range all {
		if r.ours(ing, classes) {
			ings = append(ings, ing)
		}
	}
	name := lbmodel.SharedIngressLoadBalancerName(r.settings.ClusterName, r.settings.IngressClass)
	if len(ings) == 0 {
		r.forget(sharedIngressKey)
		return retryOn(r.applier.delete(ctx, name, lbmodel.L7))
	}
	lb, report, err := r.build(ctx, ings, true)
	if err != nil {
		return retryOn(err)
	}
	if lb == nil {
		return refused(nil) // the Events of the build say why
	}
	objects := make([]runtime.Object, 0, len(ings))
	for _, ing := range ings {
		objects = append(objects, ing)
	}
	_, res := r.applier.apply(ctx, model{
		key: sharedIngressKey, lb: lb, report: report, objects: objects,
		needsStatus: slices.ContainsFunc(ings, func(i *networkingv1.Ingress) bool { return len(i.Status.LoadBalancer.Ingress) == 0 }),
		setStatus: func(ctx context.Context, status providers.Status) error {
			vips := status.VIPs
			for _, ing := range ings {
				if err := r.setStatus(ctx, ing, vips); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return res
}

// build opts the backends of ings in and builds their load balancer (one
// Ingress, or all of them on a shared VIP), sending the build's Events to
// the Ingresses they concern.
func (r *ingressReconciler) build(ctx context.Context, ings []*networkingv1.Ingress, shared bool) (*lbmodel.LoadBalancer, builder.Report, error) {
	in, forbidden, err := r.store.IngressInput(ctx, r.inputSettings(), ings, shared, inputs.APISecrets(r.client))
	if err != nil {
		return nil, builder.Report{}, err
	}
	if err := r.optIn(ctx, in.Services); err != nil {
		return nil, builder.Report{}, err
	}
	target := func(msg string) *networkingv1.Ingress {
		for _, ing := range ings {
			if strings.HasPrefix(msg, "ingress "+keyOf(ing)+":") {
				return ing
			}
		}
		return ings[0]
	}
	for _, f := range forbidden {
		// Reading Secrets is opt-in (the chart's ingressClass.readTLSSecrets):
		// without it the Ingress is served over HTTP only.
		r.recorder.Eventf(f.Ingress, corev1.EventTypeWarning, "TLSSecretForbidden",
			"Cannot read TLS Secret %s: npl-lbsync may not read Secrets; serving HTTP only", f.Secret)
	}
	lb, report := ingress.Build(in)
	// The policies of the backend Services: an Ingress is no target.
	r.attachPolicies(lb, nil, report.PoolBackends)
	for _, e := range report.Errors {
		r.recorder.Event(target(e), corev1.EventTypeWarning, "InvalidIngress", e)
	}
	for _, w := range report.Warnings {
		r.recorder.Event(target(w), corev1.EventTypeWarning, "IngressWarning", w)
	}
	return lb, report, nil
}

// ensure claims an Ingress and applies the model of its own load balancer.
func (r *ingressReconciler) ensure(ctx context.Context, key queueKey, ing *networkingv1.Ingress) syncResult {
	if err := r.patchIngress(ctx, ing, claim.ClaimPatch(ing, r.settings.ClusterName, false)); err != nil {
		return retryOn(err)
	}
	lb, report, err := r.build(ctx, []*networkingv1.Ingress{ing}, false)
	if err != nil {
		return retryOn(err)
	}
	if lb == nil {
		return refused(nil) // the Events of the build say why
	}
	_, res := r.applier.apply(ctx, model{
		key: key, lb: lb, report: report, objects: []runtime.Object{ing},
		needsStatus: len(ing.Status.LoadBalancer.Ingress) == 0, syncedEvents: true,
		setStatus: func(ctx context.Context, status providers.Status) error {
			return r.setStatus(ctx, ing, status.VIPs)
		},
	})
	return res
}

// release deletes the load balancer of an Ingress we no longer serve and
// hands the Ingress back.
func (r *ingressReconciler) release(ctx context.Context, key queueKey, ing *networkingv1.Ingress) error {
	if err := r.applier.deleteFor(ctx, ing, r.lbName(ing), lbmodel.L7); err != nil {
		return err
	}
	return r.unclaim(ctx, key, ing)
}

// unclaim hands back an Ingress no load balancer of ours serves any more:
// its VIP cleared from the status (unless it is being deleted), the claim
// released, its backends' Services synced again (they may lose their
// opt-in), and what was kept of it forgotten.
func (r *ingressReconciler) unclaim(ctx context.Context, key queueKey, ing *networkingv1.Ingress) error {
	if ing.DeletionTimestamp == nil && len(ing.Status.LoadBalancer.Ingress) > 0 {
		if err := r.setStatus(ctx, ing, nil); err != nil {
			return err
		}
	}
	if err := r.patchIngress(ctx, ing, claim.ReleasePatch(ing)); err != nil {
		return err
	}
	for _, b := range ingress.Backends(ing) {
		r.queue.Add(serviceKey(b.Namespace, b.Name))
	}
	r.forget(key)
	return nil
}

// patchIngress sends a merge patch of an Ingress built by package claim; a
// nil patch means nothing to change.
func (r *ingressReconciler) patchIngress(ctx context.Context, ing *networkingv1.Ingress, patch []byte, subresources ...string) error {
	if patch == nil {
		return nil
	}
	out, err := r.client.NetworkingV1().Ingresses(ing.Namespace).Patch(ctx, ing.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patch ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	r.writes.wrote(out)
	return nil
}

// setStatus writes the VIPs into the Ingress's status.
func (r *ingressReconciler) setStatus(ctx context.Context, ing *networkingv1.Ingress, vips []string) error {
	if last, ok := pending(&r.writes, ing); ok {
		ing = ing.DeepCopy()
		ing.Status = last.Status
	}
	return r.patchIngress(ctx, ing, claim.IngressStatusPatch(ing, vips), "status")
}
