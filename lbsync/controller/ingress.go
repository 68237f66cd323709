package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/providers"
)

func (c *Controller) enqueueIngress(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		c.queue.Add(ingressKey(ing.Namespace, ing.Name))
	}
}

// ingressUpdated queues the Ingress and the Services it stopped referencing,
// whose opt-in may have to go.
func (c *Controller) ingressUpdated(oldObj, obj any) {
	c.enqueueIngress(obj)
	old, ok1 := oldObj.(*networkingv1.Ingress)
	cur, ok2 := obj.(*networkingv1.Ingress)
	if !ok1 || !ok2 {
		return
	}
	now := ingress.Backends(cur)
	for _, b := range ingress.Backends(old) {
		if !slices.Contains(now, b) {
			c.queue.Add(serviceKey(b.Namespace, b.Name))
		}
	}
}

func (c *Controller) ingressDeleted(obj any) {
	c.enqueueIngress(obj)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		for _, b := range ingress.Backends(ing) {
			c.queue.Add(serviceKey(b.Namespace, b.Name))
		}
	}
}

func (c *Controller) enqueueAllIngresses() {
	ings, err := c.ingLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ing := range ings {
		c.queue.Add(ingressKey(ing.Namespace, ing.Name))
	}
}

// enqueueIngressesOf queues the Ingresses that reference a Service.
func (c *cluster) enqueueIngressesOf(svcKey string, delay time.Duration) {
	for _, ing := range c.store.IngressesOf(svcKey) {
		c.queue.AddAfter(ingressKey(ing.Namespace, ing.Name), delay)
	}
}

func (c *cluster) ingressClasses() []*networkingv1.IngressClass { return c.store.Classes() }

// ingressOurs reports whether we serve ing now.
func (c *Controller) ingressOurs(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass) bool {
	return ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, ingress.Config{IngressClass: c.settings.IngressClass})
}

// referencedByNPLIngress reports whether an Ingress of any npl IngressClass
// (ours or another installation's) sends requests to the Service: only then
// may nobody remove its opt-in.
func (c *cluster) referencedByNPLIngress(svc *corev1.Service) bool {
	return c.referencedByIngress(svc, ingress.Config{})
}

func (c *cluster) referencedByIngress(svc *corev1.Service, cfg ingress.Config) bool {
	classes := c.ingressClasses()
	return slices.ContainsFunc(c.store.IngressesOf(keyOf(svc)), func(ing *networkingv1.Ingress) bool {
		return ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, cfg)
	})
}

// syncIngress makes the load balancer of one Ingress match it.
func (c *Controller) syncIngress(ctx context.Context, key queueKey) syncResult {
	ing, err := c.ingLister.Ingresses(key.namespace).Get(key.name)
	if err != nil {
		c.forget(key)
		if c.settings.IngressSharedVIP {
			return c.syncSharedIngresses(ctx)
		}
		return synced()
	}
	if c.settings.IngressSharedVIP {
		return c.syncSharedIngress(ctx, key, ing)
	}
	if c.ingressOurs(ing, c.ingressClasses()) {
		return c.ensureIngress(ctx, key, ing)
	}
	if c.claimedIngress(ing) {
		return retryOn(c.releaseIngress(ctx, key, ing))
	}
	c.forget(key)
	return synced()
}

func (c *Controller) ingressLBName(ing *networkingv1.Ingress) string {
	return ingress.LoadBalancerName(c.settings.ClusterName, ing, c.settings.IngressSharedVIP, c.settings.IngressClass)
}

// claimedIngress reports whether we hold (or may hold) a load balancer for
// ing that we must clean up.
func (c *Controller) claimedIngress(ing *networkingv1.Ingress) bool {
	return claim.Releasable(ing, c.settings.ClusterName)
}

// syncSharedIngress handles one Ingress when all Ingresses of our class
// share a VIP: it claims or releases the Ingress and syncs the shared load
// balancer, which holds the rules of every Ingress we serve.
func (c *Controller) syncSharedIngress(ctx context.Context, key queueKey, ing *networkingv1.Ingress) syncResult {
	ours := c.ingressOurs(ing, c.ingressClasses())
	if ours {
		if err := c.patchIngress(ctx, ing, claim.ClaimPatch(ing, c.settings.ClusterName, false)); err != nil {
			return retryOn(err)
		}
	}
	if res := c.syncSharedIngresses(ctx); res.state == syncRetry || ours || !c.claimedIngress(ing) {
		return res
	}
	// It left the shared load balancer (built without it just above).
	return retryOn(c.unclaimIngress(ctx, key, ing))
}

// syncSharedIngresses makes the shared load balancer hold the rules of every
// Ingress we serve, and deletes it when there is none.
func (c *Controller) syncSharedIngresses(ctx context.Context) syncResult {
	c.sharedMu.Lock()
	defer c.sharedMu.Unlock()
	all, err := c.ingLister.List(labels.Everything())
	if err != nil {
		return retryOn(err)
	}
	classes := c.ingressClasses()
	var ings []*networkingv1.Ingress
	for _, ing := range all {
		if c.ingressOurs(ing, classes) {
			ings = append(ings, ing)
		}
	}
	name := lbmodel.SharedIngressLoadBalancerName(c.settings.ClusterName, c.settings.IngressClass)
	if len(ings) == 0 {
		c.forget(sharedIngressKey)
		return retryOn(c.applier.delete(ctx, name, lbmodel.L7))
	}
	lb, report, err := c.buildIngresses(ctx, ings, true)
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
	_, res := c.applier.apply(ctx, model{
		key: sharedIngressKey, lb: lb, report: report, objects: objects,
		needsStatus: slices.ContainsFunc(ings, func(i *networkingv1.Ingress) bool { return len(i.Status.LoadBalancer.Ingress) == 0 }),
		setStatus: func(ctx context.Context, status providers.Status) error {
			vips := status.VIPs
			for _, ing := range ings {
				if err := c.setIngressStatus(ctx, ing, vips); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return res
}

// buildIngresses opts the backends of ings in and builds their load
// balancer (one Ingress, or all of them on a shared VIP), sending the
// build's Events to the Ingresses they concern.
func (c *Controller) buildIngresses(ctx context.Context, ings []*networkingv1.Ingress, shared bool) (*lbmodel.LoadBalancer, builder.Report, error) {
	in, forbidden, err := c.store.IngressInput(ctx, c.inputSettings(), ings, shared, inputs.APISecrets(c.client))
	if err != nil {
		return nil, builder.Report{}, err
	}
	if err := c.optIn(ctx, in.Services); err != nil {
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
		c.recorder.Eventf(f.Ingress, corev1.EventTypeWarning, "TLSSecretForbidden",
			"Cannot read TLS Secret %s: npl-lbsync may not read Secrets; serving HTTP only", f.Secret)
	}
	lb, report := ingress.Build(in)
	for _, e := range report.Errors {
		c.recorder.Event(target(e), corev1.EventTypeWarning, "InvalidIngress", e)
	}
	for _, w := range report.Warnings {
		c.recorder.Event(target(w), corev1.EventTypeWarning, "IngressWarning", w)
	}
	return lb, report, nil
}

func (c *Controller) ensureIngress(ctx context.Context, key queueKey, ing *networkingv1.Ingress) syncResult {
	if err := c.patchIngress(ctx, ing, claim.ClaimPatch(ing, c.settings.ClusterName, false)); err != nil {
		return retryOn(err)
	}
	lb, report, err := c.buildIngresses(ctx, []*networkingv1.Ingress{ing}, false)
	if err != nil {
		return retryOn(err)
	}
	if lb == nil {
		return refused(nil) // the Events of the build say why
	}
	_, res := c.applier.apply(ctx, model{
		key: key, lb: lb, report: report, objects: []runtime.Object{ing},
		needsStatus: len(ing.Status.LoadBalancer.Ingress) == 0, syncedEvents: true,
		setStatus: func(ctx context.Context, status providers.Status) error {
			return c.setIngressStatus(ctx, ing, status.VIPs)
		},
	})
	return res
}

func (c *Controller) releaseIngress(ctx context.Context, key queueKey, ing *networkingv1.Ingress) error {
	name := c.ingressLBName(ing)
	if err := c.applier.delete(ctx, name, lbmodel.L7); err != nil {
		c.recorder.Eventf(ing, corev1.EventTypeWarning, "DeleteFailed", "Load balancer %s: %v", name, err)
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	c.recorder.Eventf(ing, corev1.EventTypeNormal, "Deleted", "Load balancer %s deleted", name)
	return c.unclaimIngress(ctx, key, ing)
}

// unclaimIngress hands back an Ingress no load balancer of ours serves any
// more: its VIP cleared from the status (unless it is being deleted), the
// claim released, its backends' Services synced again (they may lose
// their opt-in), and what was kept of it forgotten.
func (c *Controller) unclaimIngress(ctx context.Context, key queueKey, ing *networkingv1.Ingress) error {
	if ing.DeletionTimestamp == nil && len(ing.Status.LoadBalancer.Ingress) > 0 {
		if err := c.setIngressStatus(ctx, ing, nil); err != nil {
			return err
		}
	}
	if err := c.patchIngress(ctx, ing, claim.ReleasePatch(ing)); err != nil {
		return err
	}
	for _, b := range ingress.Backends(ing) {
		c.queue.Add(serviceKey(b.Namespace, b.Name))
	}
	c.forget(key)
	return nil
}

// claimedIngressNames returns the names of the L7 load balancers that an
// Ingress we serve (or still have to clean up) owns.
func (c *Controller) claimedIngressNames() map[string]bool {
	names := map[string]bool{}
	ings, _ := c.ingLister.List(labels.Everything())
	classes := c.ingressClasses()
	for _, ing := range ings {
		if c.ingressOurs(ing, classes) || c.claimedIngress(ing) {
			names[c.ingressLBName(ing)] = true
		}
	}
	return names
}

// patchIngress sends a merge patch of an Ingress built by package claim; a
// nil patch means nothing to change.
func (c *Controller) patchIngress(ctx context.Context, ing *networkingv1.Ingress, patch []byte, subresources ...string) error {
	if patch == nil {
		return nil
	}
	_, err := c.client.NetworkingV1().Ingresses(ing.Namespace).Patch(ctx, ing.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patch ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return nil
}

// setIngressStatus writes the VIPs into the Ingress's status.
func (c *Controller) setIngressStatus(ctx context.Context, ing *networkingv1.Ingress, vips []string) error {
	return c.patchIngress(ctx, ing, claim.IngressStatusPatch(ing, vips), "status")
}
