package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy"
	"github.com/nodeportlocal/npl/providers"
)

// serviceReconciler syncs the Services of type LoadBalancer: it claims
// ours, applies their models through the applier, writes their status,
// condition and Events and their Pods' registration condition
// (readiness.go), and releases them when they stop being ours.
type serviceReconciler struct {
	*cluster
	applier *applier
	metrics *Metrics
	lister  corelisters.ServiceLister

	mu sync.Mutex
	// noBackends remembers which Services had no ready backend, so the
	// NoReadyBackends Event fires on the transition only.
	noBackends map[queueKey]bool
	// podEventAt is when a Pod event last opened a key's coalescing window.
	podEventAt map[queueKey]time.Time
	// registered records, per gated Pod, which Services have it applied
	// on the load balancer (readiness.go).
	registered map[string]map[string]bool
}

func newServiceReconciler(cl *cluster, a *applier, metrics *Metrics, lister corelisters.ServiceLister) *serviceReconciler {
	return &serviceReconciler{cluster: cl, applier: a, metrics: metrics, lister: lister,
		noBackends: map[queueKey]bool{}, podEventAt: map[queueKey]time.Time{}, registered: map[string]map[string]bool{}}
}

func (r *serviceReconciler) kinds() []kind { return []kind{kindService} }

// serviceChanged queues a Service.
func (r *serviceReconciler) serviceChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if s, ok := obj.(*corev1.Service); ok {
		r.queueWithUsers(serviceKey(s.Namespace, s.Name), 0)
		// Whether it exists and is ours is in their status.
		r.queuePoliciesOf(lbpolicy.ServiceTarget(s.Namespace, s.Name))
	}
}

// sliceChanged queues the Service of an EndpointSlice, before and after
// the change, as a change of the Service itself: for a Service without a
// selector the slice chooses its Pods.
func (r *serviceReconciler) sliceChanged(oldObj, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	for _, o := range []any{oldObj, obj} {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || contract.SliceService(s) == "" {
			continue
		}
		if svc := r.store.Service(s.Namespace, contract.SliceService(s)); svc != nil {
			r.queueWithUsers(serviceKey(svc.Namespace, svc.Name), 0)
		}
	}
}

// podChanged queues the Services that select the Pod, before and after
// the change, found through the selector index rather than a scan.
func (r *serviceReconciler) podChanged(oldObj, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if oldObj == nil && hasRegistrationGate(pod) {
		// A delete (or an add): forget what an earlier Pod of this name had.
		r.mu.Lock()
		delete(r.registered, keyOf(pod))
		r.mu.Unlock()
	}
	keys := map[queueKey]bool{}
	for _, s := range r.store.ServicesSelecting(pod) {
		keys[serviceKey(s.Namespace, s.Name)] = true
	}
	if old, ok := oldObj.(*corev1.Pod); ok && !maps.Equal(old.Labels, pod.Labels) {
		for _, s := range r.store.ServicesSelecting(old) {
			keys[serviceKey(s.Namespace, s.Name)] = true
		}
	}
	now := time.Now()
	for k := range keys {
		r.queueWithUsers(k, r.coalesceDelay(k, now))
	}
}

// queueWithUsers queues a Service after delay, and the Ingresses and
// Gateways that send to it: their models hold its Pods too.
func (r *serviceReconciler) queueWithUsers(key queueKey, delay time.Duration) {
	r.queue.AddAfter(key, delay)
	r.enqueueIngressesOf(key.namespace+"/"+key.name, delay)
	r.enqueueGatewaysOf(key.namespace+"/"+key.name, delay)
}

// coalesceDelay is how long a Pod event at now waits before it queues key:
// nothing when no Pod event opened a window for key within
// CoalesceWindow (this one opens it), else until that window ends.
func (r *serviceReconciler) coalesceDelay(key queueKey, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	opened, ok := r.podEventAt[key]
	if ok && now.Sub(opened) < r.settings.CoalesceWindow && !now.Before(opened) {
		return r.settings.CoalesceWindow - now.Sub(opened)
	}
	r.podEventAt[key] = now
	return 0
}

// keys returns the key of every Service.
func (r *serviceReconciler) keys() []queueKey {
	services, _ := r.lister.List(labels.Everything())
	return keysOf(services, serviceKey)
}

// claimed adds the names of the load balancers of the Services we serve,
// or still have to clean up, to names.
func (r *serviceReconciler) claimed(names map[string]bool) {
	services, _ := r.lister.List(labels.Everything())
	for _, s := range services {
		if (claim.Ours(s, r.settings.Claim) && s.DeletionTimestamp == nil) || claim.Releasable(s, r.settings.ClusterName) {
			names[lbmodel.LoadBalancerName(r.settings.ClusterName, s.Namespace, s.Name)] = true
		}
	}
}

// sync makes the load balancer of one Service match it.
func (r *serviceReconciler) sync(ctx context.Context, key queueKey) syncResult {
	svc, err := r.lister.Services(key.namespace).Get(key.name)
	if err != nil {
		// Gone without our finalizer: deleted between its first apply and
		// the status write that claims it (ensure), or the finalizer was
		// removed by hand. Its load balancer goes now rather than at the
		// next garbage collection.
		if r.applier.hasApplied(key) {
			name := lbmodel.LoadBalancerName(r.settings.ClusterName, key.namespace, key.name)
			if err := r.applier.delete(ctx, name, lbmodel.L4); err != nil {
				return retryOn(fmt.Errorf("delete load balancer %s: %w", name, err))
			}
		}
		r.forget(key)
		return synced()
	}
	last, ok := pending(&r.writes, svc)
	if ok {
		svc = svc.DeepCopy()
		svc.Status = last.Status // the spec stays the cache's: never older than its events
	}
	if claim.Ours(svc, r.settings.Claim) && svc.DeletionTimestamp == nil {
		return r.ensure(ctx, svc, last)
	}
	if claim.Releasable(svc, r.settings.ClusterName) {
		return retryOn(r.release(ctx, svc))
	}
	r.forget(key)
	// An Ingress or route backend opted in that no npl Ingress or route
	// uses any more (optOut checks). A Service claimed as a load balancer
	// (by any installation) keeps the opt-in its claimer manages.
	if svc.DeletionTimestamp == nil && svc.Annotations[contract.AutoAnnotatedKey] == "true" &&
		svc.Annotations[contract.ClaimedByKey] == "" && !claim.HasFinalizer(svc) {
		return retryOn(r.optOut(ctx, svc))
	}
	// Another installation's, or nobody's: not ours to touch.
	return synced()
}

// forget drops what is kept of a Service, here and in the applier.
func (r *serviceReconciler) forget(key queueKey) {
	r.applier.forget(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.noBackends, key)
	delete(r.podEventAt, key)
}

// ensure claims a Service and applies its model. The claim (finalizer,
// claim record, opt-in) rides with the sync's status write, one request
// where it took two (statusWrite): the first sync's status always changes
// (the VIP, or the condition of a failure), so it carries the claim out
// right after the first apply, before any member needs a node port. A sync
// that writes no status sends the claim alone.
func (r *serviceReconciler) ensure(ctx context.Context, svc *corev1.Service, last *corev1.Service) syncResult {
	optIn := r.settings.ServiceType == builder.ServiceTypeNodePortLocal
	w := &statusWrite{r: r, svc: svc}
	// Our write that the cache does not show yet carries the claim
	// already: claiming again from the cache would conflict.
	if last == nil || claim.ClaimPatch(last, r.settings.ClusterName, optIn) != nil {
		w.claim = claim.ClaimPatch(svc, r.settings.ClusterName, optIn)
	}
	res, applied := r.build(ctx, svc, w)
	if err := w.claimAlone(ctx); err != nil {
		return retryOn(err)
	}
	if applied == nil {
		return res
	}
	return retryOn(r.updateRegistrations(ctx, svc, applied))
}

// build builds a Service's model and applies it, its status written
// through w; it returns the model as applied, nil when it was not.
func (r *serviceReconciler) build(ctx context.Context, svc *corev1.Service, w *statusWrite) (syncResult, *lbmodel.LoadBalancer) {
	key := serviceKey(svc.Namespace, svc.Name)
	lb, report := builder.Build(r.store.ServiceInput(r.inputSettings(), svc))
	for _, e := range report.Errors {
		r.recorder.Event(svc, corev1.EventTypeWarning, "InvalidService", e)
	}
	if lb == nil {
		return refused(w.condition(ctx, claim.Condition{Reason: "InvalidService", Message: fmt.Sprint(report.Errors)})), nil
	}
	own := lbpolicy.ServiceTarget(svc.Namespace, svc.Name)
	r.attachPolicies(lb, &own, nil)
	r.metrics.observeMembers(key.String(), lb)

	r.mu.Lock()
	hadNoBackends, seen := r.noBackends[key]
	r.noBackends[key] = report.ReadyBackends == 0
	r.mu.Unlock()
	if report.ReadyBackends == 0 && (!seen || !hadNoBackends) {
		r.recorder.Event(svc, corev1.EventTypeWarning, "NoReadyBackends", "No ready backend for the load balancer: its pools are empty")
	}

	applied, res := r.applier.apply(ctx, model{
		key: key, lb: lb, report: report, objects: []runtime.Object{svc},
		needsStatus: len(svc.Status.LoadBalancer.Ingress) == 0, syncedEvents: true,
		setStatus: func(ctx context.Context, status providers.Status) error {
			// No member count in the message: it would change with every
			// Pod, and the status write it costs would hold back the next
			// Pod's member (the Synced Event carries the count).
			cond := claim.Condition{OK: true, Reason: "Synced", Message: fmt.Sprintf("%d listener(s)", len(lb.Listeners))}
			if len(status.Warnings) > 0 {
				cond.Reason = "SyncedWithWarnings"
				cond.Message += "; " + strings.Join(status.Warnings, "; ")
			}
			vips := status.VIPs
			if vips == nil {
				vips = []string{}
			}
			return w.send(ctx, claim.ServiceStatusPatch(svc, vips, &cond))
		},
		setFailed: func(ctx context.Context, f failure) error {
			return w.condition(ctx, claim.Condition{Reason: f.reason, Message: f.message})
		},
	})
	return res, applied
}

// statusWrite is one sync's write of a Service's status, which carries the
// Service's claim patch (claim.WithClaim) when it lacks the claim.
type statusWrite struct {
	r   *serviceReconciler
	svc *corev1.Service
	// claim is the claim patch not sent yet; nil when none is needed.
	claim []byte
}

// send writes a status patch (nil: nothing changes) with the claim.
func (w *statusWrite) send(ctx context.Context, status []byte) error {
	if status == nil {
		return nil
	}
	if err := w.r.patchService(ctx, w.svc, claim.WithClaim(status, w.claim), "status"); err != nil {
		return err
	}
	w.claim = nil
	return nil
}

// condition sets the npl.io/LoadBalancerSynced condition alone, writing
// only when its status, reason or message changes.
func (w *statusWrite) condition(ctx context.Context, cond claim.Condition) error {
	return w.send(ctx, claim.ServiceStatusPatch(w.svc, nil, &cond))
}

// claimAlone sends the claim when no status write carried it.
func (w *statusWrite) claimAlone(ctx context.Context) error {
	if w.claim == nil {
		return nil
	}
	if err := w.r.patchService(ctx, w.svc, w.claim); err != nil {
		return err
	}
	w.claim = nil
	return nil
}

// release undoes ensure for a Service that is no longer ours or is being
// deleted: the load balancer, the status, the opt-in we added, the finalizer.
func (r *serviceReconciler) release(ctx context.Context, svc *corev1.Service) error {
	key := serviceKey(svc.Namespace, svc.Name)
	if claim.HasFinalizer(svc) || svc.Annotations[contract.ClaimedByKey] != "" {
		name := lbmodel.LoadBalancerName(r.settings.ClusterName, svc.Namespace, svc.Name)
		if err := r.applier.deleteFor(ctx, svc, name, lbmodel.L4); err != nil {
			return err
		}
		if svc.DeletionTimestamp == nil {
			if err := r.patchService(ctx, svc, claim.ClearServiceStatusPatch(svc, true), "status"); err != nil {
				return err
			}
		}
	}
	if svc.DeletionTimestamp == nil {
		if err := r.optOut(ctx, svc); err != nil {
			return err
		}
	}
	if err := r.patchService(ctx, svc, claim.ReleasePatch(svc)); err != nil {
		return err
	}
	r.forget(key)
	return nil
}

// optOut removes the NodePortLocal opt-in that we manage, unless an npl
// Ingress or route still needs the Service's node ports.
func (r *serviceReconciler) optOut(ctx context.Context, svc *corev1.Service) error {
	if r.referencedByNPLIngress(svc) || r.referencedByNPLRoute(svc) {
		return nil
	}
	patch, _ := claim.AnnotationPatch(svc, false)
	return r.patchService(ctx, svc, patch)
}
