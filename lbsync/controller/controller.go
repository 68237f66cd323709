// Package controller is npl-lbsync's reconcile shell: informers on Services,
// Pods and Nodes, a rate-limited queue keyed by Service, and the Kubernetes
// writes (opt-in annotation, finalizer, status, condition, Events) around the
// pure model builder and a providers.Provider. It also garbage-collects load
// balancers that no Service claims. Only the leader runs it; followers keep
// warm caches (Start without RunWorkers).
package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/providers"
)

// Settings are the parts of the configuration the controller uses.
type Settings struct {
	ClusterName  string
	ServiceType  string // builder.ServiceType*
	Family       string // IPv4 | IPv6
	Claim        claim.ClaimConfig
	ResyncPeriod time.Duration
	// Workers is the number of Services synced in parallel (default 4).
	Workers int
	// CoalesceWindow delays a Service's sync after a Pod event so that a
	// burst of Pod changes gives one provider call (default 20 ms).
	CoalesceWindow time.Duration
	// MaxBackoff caps the retry delay of a failed sync (default 30 s).
	MaxBackoff time.Duration
	// DrainPeriod keeps a draining (disabled) member in its pool at least
	// this long, even after its Pod is gone; 0 removes it with the Pod.
	DrainPeriod time.Duration
	// IngressClass is the name of our IngressClass; empty serves every
	// IngressClass whose controller is npl.io/ingress-controller.
	IngressClass string
	// IngressSharedVIP serves all our Ingresses on one load balancer.
	IngressSharedVIP bool
}

// Controller reconciles load balancers with Services.
type Controller struct {
	settings Settings
	client   kubernetes.Interface
	provider providers.Provider
	recorder record.EventRecorder
	metrics  *Metrics

	factory     informers.SharedInformerFactory
	svcLister   corelisters.ServiceLister
	svcIndexer  cache.Indexer
	podIndexer  cache.Indexer
	nodeLister  corelisters.NodeLister
	ingLister   networkinglisters.IngressLister
	ingIndexer  cache.Indexer
	classLister networkinglisters.IngressClassLister
	synced      []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]

	// sharedMu serialises the syncs of the shared Ingress load balancer,
	// which any Ingress's key may trigger.
	sharedMu sync.Mutex

	mu sync.Mutex
	// applied holds the hash of the model last applied per Service key, to
	// skip no-op provider calls.
	applied map[string]string
	// noBackends remembers which Services had no ready backend, so the
	// NoReadyBackends Event fires on the transition only.
	noBackends map[string]bool
	// drains holds each Service's draining members (drain.go).
	drains map[string]drainTracker
	// registered records, per gated Pod, which Services have it applied
	// on the load balancer (readiness.go).
	registered map[string]map[string]bool

	cachesSynced atomic.Bool
	firstSync    atomic.Bool
	pending      atomic.Int64
}

// New builds the controller and its informers. Nothing runs until Start.
func New(settings Settings, client kubernetes.Interface, provider providers.Provider, metrics *Metrics) *Controller {
	if settings.Workers <= 0 {
		settings.Workers = 4
	}
	if settings.CoalesceWindow <= 0 {
		settings.CoalesceWindow = 20 * time.Millisecond
	}
	if settings.MaxBackoff <= 0 {
		settings.MaxBackoff = 30 * time.Second
	}
	if settings.ResyncPeriod <= 0 {
		settings.ResyncPeriod = 10 * time.Minute
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim))

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "npl-lbsync"})

	c := &Controller{
		settings: settings,
		client:   client,
		provider: provider,
		recorder: recorder,
		metrics:  metrics,
		factory:  factory,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, settings.MaxBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "npl-lbsync"}),
		applied:    map[string]string{},
		noBackends: map[string]bool{},
		drains:     map[string]drainTracker{},
		registered: map[string]map[string]bool{},
	}

	svcInformer := factory.Core().V1().Services()
	podInformer := factory.Core().V1().Pods()
	nodeInformer := factory.Core().V1().Nodes()
	ingInformer := factory.Networking().V1().Ingresses()
	classInformer := factory.Networking().V1().IngressClasses()
	utilruntime.Must(ingInformer.Informer().AddIndexers(cache.Indexers{backendIndex: ingressBackendKeys}))
	c.ingLister = ingInformer.Lister()
	c.ingIndexer = ingInformer.Informer().GetIndexer()
	c.classLister = classInformer.Lister()
	_, _ = ingInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueIngress,
		UpdateFunc: c.ingressUpdated,
		DeleteFunc: c.ingressDeleted,
	})
	_, _ = classInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAllIngresses() },
		UpdateFunc: func(any, any) { c.enqueueAllIngresses() },
		DeleteFunc: func(any) { c.enqueueAllIngresses() },
	})
	utilruntime.Must(svcInformer.Informer().AddIndexers(cache.Indexers{selectorIndex: serviceSelectorTerms}))
	utilruntime.Must(podInformer.Informer().AddIndexers(cache.Indexers{labelIndex: podLabelTerms}))
	c.svcLister = svcInformer.Lister()
	c.svcIndexer = svcInformer.Informer().GetIndexer()
	c.podIndexer = podInformer.Informer().GetIndexer()
	c.nodeLister = nodeInformer.Lister()

	_, _ = svcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueService(obj, 0) },
		UpdateFunc: func(_, obj any) { c.enqueueService(obj, 0) },
		DeleteFunc: func(obj any) { c.enqueueService(obj, 0) },
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueuePodServices(nil, obj) },
		UpdateFunc: func(old, obj any) { c.enqueuePodServices(old, obj) },
		DeleteFunc: func(obj any) { c.enqueuePodServices(nil, obj) },
	})
	_, _ = nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.nodesChanged() },
		UpdateFunc: func(old, obj any) { c.nodeUpdated(old, obj) },
		DeleteFunc: func(any) { c.nodesChanged() },
	})
	c.synced = []cache.InformerSynced{svcInformer.Informer().HasSynced, podInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced,
		ingInformer.Informer().HasSynced, classInformer.Informer().HasSynced}
	metrics.setQueueDepth(func() float64 { return float64(c.queue.Len()) })
	return c
}

// Start runs the informers and waits for their caches. Followers call only
// this, so that a new leader starts with warm caches.
func (c *Controller) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("wait for informer caches: %w", ctx.Err())
	}
	c.cachesSynced.Store(true)
	return nil
}

// Services is the cached Service lister (for the admission webhook).
func (c *Controller) Services() corelisters.ServiceLister { return c.svcLister }

// CachesSynced reports whether Start has finished.
func (c *Controller) CachesSynced() bool { return c.cachesSynced.Load() }

// FirstSyncDone reports whether, since RunWorkers began, every Service queued
// at start has been synced once and the first garbage collection has run.
func (c *Controller) FirstSyncDone() bool { return c.firstSync.Load() }

// RunWorkers syncs Services until ctx ends: the leader's part. It queues
// every Service, runs the workers, collects garbage once the first pass is
// done and again on every resync period, which also forces a provider call
// for every Service so drift on the load balancer side is repaired.
func (c *Controller) RunWorkers(ctx context.Context) {
	logger := klog.FromContext(ctx)
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()

	initial := c.queueAll(false)
	c.pending.Store(int64(initial))
	logger.Info("Starting workers", "workers", c.settings.Workers, "services", initial)
	var wg sync.WaitGroup
	for range c.settings.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	wg.Go(func() {
		// The first garbage collection waits for the first pass, so that
		// nothing a Service still claims is ever deleted.
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return c.pending.Load() <= 0, nil
		})
		if ctx.Err() != nil {
			return
		}
		c.collectGarbage(ctx)
		c.firstSync.Store(true)
		logger.Info("First sync done")
		ticker := time.NewTicker(c.settings.ResyncPeriod)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				c.queueAll(true)
				c.collectGarbage(ctx)
			}
		}
	})
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// queueAll queues every Service; with force, the no-op skip is disabled for
// this pass so the provider compares with what the load balancer has.
func (c *Controller) queueAll(force bool) int {
	services, err := c.svcLister.List(labels.Everything())
	if err != nil {
		return 0
	}
	if force {
		c.mu.Lock()
		clear(c.applied)
		c.mu.Unlock()
	}
	for _, s := range services {
		c.queue.Add(keyOf(s))
	}
	ings, _ := c.ingLister.List(labels.Everything())
	for _, ing := range ings {
		c.queue.Add(ingressKeyPrefix + keyOf(ing))
	}
	return len(services) + len(ings)
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	var err error
	if strings.HasPrefix(key, ingressKeyPrefix) {
		err = c.syncIngress(ctx, key)
	} else {
		err = c.syncService(ctx, key)
	}
	c.metrics.observeReconcile(time.Since(start), err)
	if c.pending.Load() > 0 {
		c.pending.Add(-1)
	}
	if err != nil {
		c.metrics.SyncFailures.Inc()
		klog.FromContext(ctx).Error(err, "Sync failed; will retry", "service", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func keyOf(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

func (c *Controller) enqueueService(obj any, delay time.Duration) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.queue.AddAfter(d.Key, delay)
		c.enqueueIngressesOf(d.Key, delay)
		return
	}
	if s, ok := obj.(*corev1.Service); ok {
		c.queue.AddAfter(keyOf(s), delay)
		c.enqueueIngressesOf(keyOf(s), delay)
	}
}

// enqueuePodServices queues the Services that select the Pod, before and
// after the change, found through the selector index rather than a scan.
func (c *Controller) enqueuePodServices(oldObj, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if oldObj == nil && hasRegistrationGate(pod) {
		// A delete (or an add): forget what an earlier Pod of this name had.
		c.mu.Lock()
		delete(c.registered, keyOf(pod))
		c.mu.Unlock()
	}
	keys := map[string]bool{}
	for _, s := range c.servicesSelecting(pod) {
		keys[keyOf(s)] = true
	}
	if old, ok := oldObj.(*corev1.Pod); ok && !equalLabels(old.Labels, pod.Labels) {
		for _, s := range c.servicesSelecting(old) {
			keys[keyOf(s)] = true
		}
	}
	for k := range keys {
		c.queue.AddAfter(k, c.settings.CoalesceWindow)
		c.enqueueIngressesOf(k, c.settings.CoalesceWindow)
	}
}

func (c *Controller) nodesChanged() {
	if c.settings.ServiceType != builder.ServiceTypeNodePort {
		return
	}
	c.queueAll(false)
}

func (c *Controller) nodeUpdated(oldObj, obj any) {
	old, ok1 := oldObj.(*corev1.Node)
	cur, ok2 := obj.(*corev1.Node)
	if !ok1 || !ok2 || nodeView(old) == nodeView(cur) {
		return
	}
	c.nodesChanged()
}

// nodeView is what NodePort mode reads of a Node, to ignore heartbeats.
func nodeView(n *corev1.Node) string {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	b, _ := json.Marshal(struct {
		A []corev1.NodeAddress
		U bool
		R bool
	}{n.Status.Addresses, n.Spec.Unschedulable, ready})
	return string(b)
}

// syncService makes the load balancer of one Service match it.
func (c *Controller) syncService(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.svcLister.Services(ns).Get(name)
	if err != nil {
		// Gone without our finalizer (or it was removed by hand): the
		// garbage collector removes what may be left.
		c.forget(key)
		return nil
	}
	if claim.Ours(svc, c.settings.Claim) && svc.DeletionTimestamp == nil {
		return c.ensure(ctx, svc)
	}
	if claim.ReleasableBy(svc, c.settings.ClusterName) {
		return c.release(ctx, svc)
	}
	c.forget(key)
	// An Ingress backend opted in that no npl Ingress uses any more. A
	// Service claimed as a load balancer (by any installation) keeps the
	// opt-in its claimer manages.
	if svc.DeletionTimestamp == nil && svc.Annotations[claim.AutoAnnotatedKey] == "true" &&
		svc.Annotations[claim.ClaimedByKey] == "" && !claim.HasCleanupFinalizer(svc) && !c.referencedByNPLIngress(svc) {
		return c.patchOptIn(ctx, svc, false)
	}
	// Another installation's, or nobody's: not ours to touch.
	return nil
}

func (c *Controller) forget(key string) {
	c.mu.Lock()
	delete(c.applied, key)
	delete(c.noBackends, key)
	delete(c.drains, key)
	c.mu.Unlock()
}

// ensure claims a Service and applies its model.
func (c *Controller) ensure(ctx context.Context, svc *corev1.Service) error {
	logger := klog.FromContext(ctx).WithValues("service", klog.KObj(svc))
	key := keyOf(svc)
	if err := c.claimService(ctx, svc, c.settings.ServiceType == builder.ServiceTypeNodePortLocal); err != nil {
		return err
	}
	lb, report := builder.Build(builder.Input{
		ClusterName: c.settings.ClusterName,
		ServiceType: c.settings.ServiceType,
		Family:      c.settings.Family,
		Service:     svc,
		Pods:        c.podsFor(svc),
		Nodes:       c.nodesFor(),
	})
	for _, e := range report.Errors {
		c.recorder.Event(svc, corev1.EventTypeWarning, "InvalidService", e)
	}
	if lb == nil {
		return c.setCondition(ctx, svc, false, "InvalidService", fmt.Sprint(report.Errors))
	}
	c.applyDrains(key, lb)
	c.metrics.observeMembers(key, lb)

	c.mu.Lock()
	hadNoBackends, seen := c.noBackends[key]
	c.noBackends[key] = report.ReadyBackends == 0
	c.mu.Unlock()
	if report.ReadyBackends == 0 && (!seen || !hadNoBackends) {
		c.recorder.Event(svc, corev1.EventTypeWarning, "NoReadyBackends", "No ready backend for the load balancer: its pools are empty")
	}

	hash := modelHash(lb)
	c.mu.Lock()
	unchanged := c.applied[key] == hash
	c.mu.Unlock()
	if unchanged && len(svc.Status.LoadBalancer.Ingress) > 0 {
		return c.updateRegistrations(ctx, svc, lb)
	}
	status, err := c.callEnsure(ctx, lb)
	if err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "SyncFailed", "Load balancer %s: %v", lb.Name, err)
		if cerr := c.setCondition(ctx, svc, false, "SyncFailed", err.Error()); cerr != nil {
			logger.Error(cerr, "Set condition")
		}
		return fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	c.mu.Lock()
	first := c.applied[key] == ""
	c.applied[key] = hash
	c.mu.Unlock()
	if err := c.setStatus(ctx, svc, status.VIPs, true, "Synced", fmt.Sprintf("%d listener(s), %d ready backend(s)", len(lb.Listeners), report.ReadyBackends)); err != nil {
		return err
	}
	if err := c.updateRegistrations(ctx, svc, lb); err != nil {
		return err
	}
	if !unchanged && !first {
		c.recorder.Eventf(svc, corev1.EventTypeNormal, "Synced", "Load balancer %s applied: %d ready backend(s)", lb.Name, report.ReadyBackends)
	} else if first {
		logger.V(2).Info("Applied load balancer", "lb", lb.Name, "readyBackends", report.ReadyBackends)
	}
	return nil
}

// release undoes ensure for a Service that is no longer ours or is being
// deleted: the load balancer, the status, the opt-in we added, the finalizer.
func (c *Controller) release(ctx context.Context, svc *corev1.Service) error {
	key := keyOf(svc)
	if claim.HasCleanupFinalizer(svc) || svc.Annotations[claim.ClaimedByKey] != "" {
		name := providers.LoadBalancerName(c.settings.ClusterName, svc.Namespace, svc.Name)
		if err := c.callDelete(ctx, name, providers.L4); err != nil {
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "DeleteFailed", "Load balancer %s: %v", name, err)
			return fmt.Errorf("delete load balancer %s: %w", name, err)
		}
		c.recorder.Eventf(svc, corev1.EventTypeNormal, "Deleted", "Load balancer %s deleted", name)
		if svc.DeletionTimestamp == nil {
			if err := c.clearStatus(ctx, svc); err != nil {
				return err
			}
		}
	}
	if svc.DeletionTimestamp == nil {
		if err := c.patchOptIn(ctx, svc, false); err != nil {
			return err
		}
	}
	if err := c.removeFinalizer(ctx, svc); err != nil {
		return err
	}
	c.forget(key)
	return nil
}

// collectGarbage deletes this cluster's load balancers that no Service
// claims. It runs only after the caches synced and the first pass, and does
// nothing when List fails: an error never deletes anything.
func (c *Controller) collectGarbage(ctx context.Context) {
	logger := klog.FromContext(ctx)
	lbs, err := c.callList(ctx)
	if err != nil {
		logger.Error(err, "Garbage collection skipped: list load balancers")
		return
	}
	claimed := c.claimedNames()
	for _, lb := range lbs {
		if claimed[lb.Name] {
			continue
		}
		logger.Info("Deleting orphaned load balancer", "lb", lb.Name, "service", lb.Service)
		if err := c.callDelete(ctx, lb.Name, lb.Kind); err != nil {
			logger.Error(err, "Delete orphaned load balancer", "lb", lb.Name)
		}
	}
}

// claimedNames returns the names of the load balancers that a Service or
// an Ingress we serve (or still have to clean up) owns, computed once per
// garbage collection from the caches.
func (c *Controller) claimedNames() map[string]bool {
	names := map[string]bool{}
	services, _ := c.svcLister.List(labels.Everything())
	for _, s := range services {
		if (claim.Ours(s, c.settings.Claim) && s.DeletionTimestamp == nil) || claim.ReleasableBy(s, c.settings.ClusterName) {
			names[providers.LoadBalancerName(c.settings.ClusterName, s.Namespace, s.Name)] = true
		}
	}
	for name := range c.claimedIngressNames() {
		names[name] = true
	}
	return names
}

func modelHash(lb *providers.LoadBalancer) string {
	b, _ := json.Marshal(lb)
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// podsFor returns the candidate Pods of a Service through the label index:
// the Pods carrying one of its selector terms. The builder checks the rest.
func (c *Controller) podsFor(svc *corev1.Service) []*corev1.Pod {
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	var best []any
	first := true
	for k, v := range svc.Spec.Selector {
		objs, err := c.podIndexer.ByIndex(labelIndex, term(svc.Namespace, k, v))
		if err != nil {
			return nil
		}
		if first || len(objs) < len(best) {
			best, first = objs, false
		}
	}
	out := make([]*corev1.Pod, 0, len(best))
	for _, o := range best {
		if p, ok := o.(*corev1.Pod); ok && builder.Selects(svc, p) {
			out = append(out, p)
		}
	}
	return out
}

func (c *Controller) nodesFor() []*corev1.Node {
	if c.settings.ServiceType != builder.ServiceTypeNodePort {
		return nil
	}
	nodes, _ := c.nodeLister.List(labels.Everything())
	return nodes
}

// servicesSelecting returns the Services whose selector matches the Pod.
func (c *Controller) servicesSelecting(pod *corev1.Pod) []*corev1.Service {
	seen := map[string]bool{}
	var out []*corev1.Service
	for k, v := range pod.Labels {
		objs, err := c.svcIndexer.ByIndex(selectorIndex, term(pod.Namespace, k, v))
		if err != nil {
			continue
		}
		for _, o := range objs {
			s, ok := o.(*corev1.Service)
			if !ok || seen[keyOf(s)] || !builder.Selects(s, pod) {
				continue
			}
			seen[keyOf(s)] = true
			out = append(out, s)
		}
	}
	return out
}
