package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/providers"
)

const (
	// ingressKeyPrefix marks an Ingress in the queue, whose other keys are
	// Services ("namespace/name").
	ingressKeyPrefix = "ingress:"
	// backendIndex indexes Ingresses by the "namespace/name" of each
	// backend Service.
	backendIndex = "backendService"
)

func ingressBackendKeys(obj any) ([]string, error) {
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, b := range ingress.Backends(ing) {
		out = append(out, b.String())
	}
	return out, nil
}

func (c *Controller) enqueueIngress(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.queue.Add(ingressKeyPrefix + d.Key)
		return
	}
	if ing, ok := obj.(*networkingv1.Ingress); ok {
		c.queue.Add(ingressKeyPrefix + keyOf(ing))
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
			c.queue.Add(b.String())
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
			c.queue.Add(b.String())
		}
	}
}

func (c *Controller) enqueueAllIngresses() {
	ings, err := c.ingLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ing := range ings {
		c.queue.Add(ingressKeyPrefix + keyOf(ing))
	}
}

// enqueueIngressesOf queues the Ingresses that reference a Service.
func (c *Controller) enqueueIngressesOf(svcKey string, delay time.Duration) {
	objs, err := c.ingIndexer.ByIndex(backendIndex, svcKey)
	if err != nil {
		return
	}
	for _, o := range objs {
		if ing, ok := o.(*networkingv1.Ingress); ok {
			c.queue.AddAfter(ingressKeyPrefix+keyOf(ing), delay)
		}
	}
}

func (c *Controller) ingressClasses() []*networkingv1.IngressClass {
	classes, _ := c.classLister.List(labels.Everything())
	return classes
}

// ingressOurs reports whether we serve ing now.
func (c *Controller) ingressOurs(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass) bool {
	return ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, ingress.Config{IngressClass: c.settings.IngressClass})
}

// referencedByNPLIngress reports whether an Ingress of any npl IngressClass
// (ours or another installation's) sends requests to the Service: only then
// may nobody remove its opt-in.
func (c *Controller) referencedByNPLIngress(svc *corev1.Service) bool {
	return c.referencedByIngress(svc, ingress.Config{})
}

func (c *Controller) referencedByIngress(svc *corev1.Service, cfg ingress.Config) bool {
	objs, err := c.ingIndexer.ByIndex(backendIndex, keyOf(svc))
	if err != nil {
		return false
	}
	classes := c.ingressClasses()
	return slices.ContainsFunc(objs, func(o any) bool {
		ing, ok := o.(*networkingv1.Ingress)
		return ok && ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, cfg)
	})
}

// syncIngress makes the load balancer of one Ingress match it.
func (c *Controller) syncIngress(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(strings.TrimPrefix(key, ingressKeyPrefix))
	if err != nil {
		return nil
	}
	ing, err := c.ingLister.Ingresses(ns).Get(name)
	if err != nil {
		c.forget(key)
		if c.settings.IngressSharedVIP {
			return c.syncSharedIngresses(ctx)
		}
		return nil
	}
	if c.settings.IngressSharedVIP {
		return c.syncSharedIngress(ctx, key, ing)
	}
	if c.ingressOurs(ing, c.ingressClasses()) {
		return c.ensureIngress(ctx, key, ing)
	}
	if c.claimedIngress(ing) {
		return c.releaseIngress(ctx, key, ing)
	}
	c.forget(key)
	return nil
}

func (c *Controller) ingressLBName(ing *networkingv1.Ingress) string {
	return ingress.LoadBalancerName(c.settings.ClusterName, ing, c.settings.IngressSharedVIP, c.settings.IngressClass)
}

// claimedIngress reports whether we hold (or may hold) a load balancer for
// ing that we must clean up.
func (c *Controller) claimedIngress(ing *networkingv1.Ingress) bool {
	owner, recorded := ing.Annotations[claim.ClaimedByKey]
	return (recorded && owner == c.settings.ClusterName) || (!recorded && slices.Contains(ing.Finalizers, claim.CleanupFinalizer))
}

// sharedKey is the queue-independent key of the shared load balancer's
// applied model.
const sharedKey = "ingress-shared"

// syncSharedIngress handles one Ingress when all Ingresses of our class
// share a VIP: it claims or releases the Ingress and syncs the shared load
// balancer, which holds the rules of every Ingress we serve.
func (c *Controller) syncSharedIngress(ctx context.Context, key string, ing *networkingv1.Ingress) error {
	ours := c.ingressOurs(ing, c.ingressClasses())
	if ours {
		if err := c.patchIngressClaim(ctx, ing, true); err != nil {
			return err
		}
	}
	if err := c.syncSharedIngresses(ctx); err != nil {
		return err
	}
	if ours || !c.claimedIngress(ing) {
		return nil
	}
	// It left the shared load balancer (built without it just above).
	if ing.DeletionTimestamp == nil && len(ing.Status.LoadBalancer.Ingress) > 0 {
		if err := c.setIngressStatus(ctx, ing, nil); err != nil {
			return err
		}
	}
	if err := c.patchIngressClaim(ctx, ing, false); err != nil {
		return err
	}
	for _, b := range ingress.Backends(ing) {
		c.queue.Add(b.String())
	}
	c.forget(key)
	return nil
}

// syncSharedIngresses makes the shared load balancer hold the rules of every
// Ingress we serve, and deletes it when there is none.
func (c *Controller) syncSharedIngresses(ctx context.Context) error {
	c.sharedMu.Lock()
	defer c.sharedMu.Unlock()
	all, err := c.ingLister.List(labels.Everything())
	if err != nil {
		return err
	}
	classes := c.ingressClasses()
	var ings []*networkingv1.Ingress
	for _, ing := range all {
		if c.ingressOurs(ing, classes) {
			ings = append(ings, ing)
		}
	}
	name := providers.SharedIngressLoadBalancerName(c.settings.ClusterName, c.settings.IngressClass)
	if len(ings) == 0 {
		c.forget(sharedKey)
		return c.callDelete(ctx, name, providers.L7)
	}
	lb, _, err := c.buildIngresses(ctx, ings, true)
	if err != nil || lb == nil {
		return err
	}
	c.applyDrains(sharedKey, lb)
	hash := modelHash(lb)
	c.mu.Lock()
	unchanged := c.applied[sharedKey] == hash
	c.mu.Unlock()
	if unchanged && !slices.ContainsFunc(ings, func(i *networkingv1.Ingress) bool { return len(i.Status.LoadBalancer.Ingress) == 0 }) {
		return nil
	}
	status, err := c.callEnsure(ctx, lb)
	if err != nil {
		for _, ing := range ings {
			c.recorder.Eventf(ing, corev1.EventTypeWarning, "SyncFailed", "Load balancer %s: %v", lb.Name, err)
		}
		return fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	c.mu.Lock()
	c.applied[sharedKey] = hash
	c.mu.Unlock()
	for _, ing := range ings {
		if err := c.setIngressStatus(ctx, ing, status.VIPs); err != nil {
			return err
		}
	}
	return nil
}

// buildIngresses opts the backends of ings in and builds their load
// balancer (one Ingress, or all of them on a shared VIP), sending the
// build's Events to the Ingresses they concern.
func (c *Controller) buildIngresses(ctx context.Context, ings []*networkingv1.Ingress, shared bool) (*providers.LoadBalancer, builder.Report, error) {
	var services []*corev1.Service
	var pods []*corev1.Pod
	var secrets []*corev1.Secret
	seen := map[string]bool{}
	for _, ing := range ings {
		for _, ref := range ingress.Backends(ing) {
			if seen[ref.String()] {
				continue
			}
			seen[ref.String()] = true
			svc, err := c.svcLister.Services(ref.Namespace).Get(ref.Name)
			if err != nil {
				continue // Build reports the missing backend
			}
			services = append(services, svc)
			pods = append(pods, c.podsFor(svc)...)
			if c.settings.ServiceType == builder.ServiceTypeNodePortLocal && ingress.WantsOptIn(svc) {
				if err := c.patchOptIn(ctx, svc, true); err != nil {
					return nil, builder.Report{}, err
				}
			}
		}
		s, err := c.ingressSecrets(ctx, ing)
		if err != nil {
			return nil, builder.Report{}, err
		}
		secrets = append(secrets, s...)
	}
	lb, report := ingress.Build(ingress.Input{
		ClusterName: c.settings.ClusterName, ServiceType: c.settings.ServiceType, Family: c.settings.Family,
		Ingresses: ings, SharedVIP: shared, IngressClass: c.settings.IngressClass,
		Services: services, Pods: pods, Nodes: c.nodesFor(), Secrets: secrets,
	})
	target := func(msg string) *networkingv1.Ingress {
		for _, ing := range ings {
			if strings.HasPrefix(msg, "ingress "+keyOf(ing)+":") {
				return ing
			}
		}
		return ings[0]
	}
	for _, e := range report.Errors {
		c.recorder.Event(target(e), corev1.EventTypeWarning, "InvalidIngress", e)
	}
	for _, w := range report.Warnings {
		c.recorder.Event(target(w), corev1.EventTypeWarning, "IngressWarning", w)
	}
	return lb, report, nil
}

func (c *Controller) ensureIngress(ctx context.Context, key string, ing *networkingv1.Ingress) error {
	if err := c.patchIngressClaim(ctx, ing, true); err != nil {
		return err
	}
	lb, report, err := c.buildIngresses(ctx, []*networkingv1.Ingress{ing}, false)
	if err != nil {
		return err
	}
	if lb == nil {
		return nil
	}
	c.applyDrains(key, lb)
	hash := modelHash(lb)
	c.mu.Lock()
	unchanged := c.applied[key] == hash
	c.mu.Unlock()
	if unchanged && len(ing.Status.LoadBalancer.Ingress) > 0 {
		return nil
	}
	status, err := c.callEnsure(ctx, lb)
	if err != nil {
		c.recorder.Eventf(ing, corev1.EventTypeWarning, "SyncFailed", "Load balancer %s: %v", lb.Name, err)
		return fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	c.mu.Lock()
	first := c.applied[key] == ""
	c.applied[key] = hash
	c.mu.Unlock()
	if err := c.setIngressStatus(ctx, ing, status.VIPs); err != nil {
		return err
	}
	if !first {
		c.recorder.Eventf(ing, corev1.EventTypeNormal, "Synced", "Load balancer %s applied: %d ready backend(s)", lb.Name, report.ReadyBackends)
	}
	klog.FromContext(ctx).V(2).Info("Applied Ingress load balancer", "ingress", klog.KObj(ing), "lb", lb.Name)
	return nil
}

// ingressSecrets reads the TLS Secrets an Ingress names. They are read on
// demand, not cached, so npl-lbsync holds no Secret it does not serve.
func (c *Controller) ingressSecrets(ctx context.Context, ing *networkingv1.Ingress) ([]*corev1.Secret, error) {
	var out []*corev1.Secret
	for _, t := range ing.Spec.TLS {
		if t.SecretName == "" {
			continue
		}
		s, err := c.client.CoreV1().Secrets(ing.Namespace).Get(ctx, t.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // Build reports the missing Secret
		}
		if apierrors.IsForbidden(err) {
			// Reading Secrets is opt-in (the chart's ingressClass.readTLSSecrets):
			// without it the Ingress is served over HTTP only.
			c.recorder.Eventf(ing, corev1.EventTypeWarning, "TLSSecretForbidden",
				"Cannot read TLS Secret %s: npl-lbsync may not read Secrets; serving HTTP only", t.SecretName)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get TLS secret %s/%s of ingress %s: %w", ing.Namespace, t.SecretName, ing.Name, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Controller) releaseIngress(ctx context.Context, key string, ing *networkingv1.Ingress) error {
	name := c.ingressLBName(ing)
	if err := c.callDelete(ctx, name, providers.L7); err != nil {
		c.recorder.Eventf(ing, corev1.EventTypeWarning, "DeleteFailed", "Load balancer %s: %v", name, err)
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	c.recorder.Eventf(ing, corev1.EventTypeNormal, "Deleted", "Load balancer %s deleted", name)
	if ing.DeletionTimestamp == nil && len(ing.Status.LoadBalancer.Ingress) > 0 {
		if err := c.setIngressStatus(ctx, ing, nil); err != nil {
			return err
		}
	}
	if err := c.patchIngressClaim(ctx, ing, false); err != nil {
		return err
	}
	for _, b := range ingress.Backends(ing) {
		c.queue.Add(b.String())
	}
	c.forget(key)
	return nil
}

// patchIngressClaim adds (or removes) our finalizer and claim record.
func (c *Controller) patchIngressClaim(ctx context.Context, ing *networkingv1.Ingress, claimIt bool) error {
	has := slices.Contains(ing.Finalizers, claim.CleanupFinalizer)
	owner, recorded := ing.Annotations[claim.ClaimedByKey]
	finalizers := slices.Clone(ing.Finalizers)
	var value any
	switch {
	case claimIt && has && owner == c.settings.ClusterName:
		return nil
	case claimIt:
		if !has {
			finalizers = append(finalizers, claim.CleanupFinalizer)
		}
		value = c.settings.ClusterName
	case !has && !recorded:
		return nil
	default:
		finalizers = slices.DeleteFunc(finalizers, func(f string) bool { return f == claim.CleanupFinalizer })
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "annotations": map[string]any{claim.ClaimedByKey: value}, "resourceVersion": ing.ResourceVersion,
	}})
	if err != nil {
		return err
	}
	if _, err := c.client.NetworkingV1().Ingresses(ing.Namespace).Patch(ctx, ing.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return nil
}

func (c *Controller) setIngressStatus(ctx context.Context, ing *networkingv1.Ingress, vips []string) error {
	in := make([]networkingv1.IngressLoadBalancerIngress, 0, len(vips))
	for _, v := range vips {
		in = append(in, networkingv1.IngressLoadBalancerIngress{IP: v})
	}
	if slices.EqualFunc(ing.Status.LoadBalancer.Ingress, in, func(a, b networkingv1.IngressLoadBalancerIngress) bool {
		return a.IP == b.IP && a.Hostname == b.Hostname
	}) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": in}}})
	if err != nil {
		return err
	}
	if _, err := c.client.NetworkingV1().Ingresses(ing.Namespace).Patch(ctx, ing.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch status of ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
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
