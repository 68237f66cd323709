// Package controller is npl-lbsync's reconcile loop: a shell (Controller)
// that wires the informers to one reconciler per kind (Services, Ingresses,
// Gateways, GatewayClasses) through a rate-limited queue of typed keys, and
// one applier that alone talks to the providers.Provider. The reconcilers
// make the Kubernetes writes (opt-in annotation, finalizer, status,
// condition, Events) around the pure model builders; the applier skips
// no-op calls, keeps draining members and garbage-collects the load
// balancers nothing claims. Only the leader runs the workers; followers
// keep warm caches (Start without RunWorkers).
package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/inputs"
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
	// CoalesceWindow groups a burst of Pod events into few provider calls
	// (default 20 ms): the first Pod event of a Service queues it at once,
	// so that an isolated change is applied without delay; the events
	// within the window after it wait until the window ends, so a burst
	// gives at most two syncs (and those during a sync, one more).
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
	// GatewayFeatures are the features announced in the status of npl's
	// GatewayClasses (gateway.FeaturesFor the provider).
	GatewayFeatures []gatewayv1.FeatureName
	// AllowedVIPs are the ranges a requested VIP must lie in (the
	// configuration's allowedVIPs, else vipPool); none refuses every
	// requested VIP.
	AllowedVIPs []netip.Prefix
	// NodePortRange is the range npl-agent allocates node ports from
	// (default contract.DefaultPortRange): annotation entries outside it,
	// or that name an address of another node than the Pod's, are no
	// members (builder.Input.AgentPorts).
	NodePortRange contract.PortRange
}

// Controller reconciles load balancers with Services, Ingresses and
// Gateways: the shell that wires the informers to one reconciler per kind
// and runs them.
type Controller struct {
	*cluster
	metrics *Metrics
	applier *applier

	factory   informers.SharedInformerFactory
	svcLister corelisters.ServiceLister
	synced    []cache.InformerSynced

	services  *serviceReconciler
	ingresses *ingressReconciler
	gateways  *gatewayReconciler
	classes   *gatewayClassReconciler
	policies  *policyReconciler
	// policyCaps is what the provider expresses of a pool's policy.
	policyCaps lbmodel.PolicyCapabilities
	// reconcilers are all of them, in the order of a full pass; byKind
	// selects the one that syncs a key.
	reconcilers []reconciler
	byKind      map[kind]reconciler

	// nsHandler registers the Namespace handler of the Gateway API once.
	nsHandler sync.Once

	cachesSynced atomic.Bool
	firstSync    atomic.Bool
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
	if settings.NodePortRange == (contract.PortRange{}) {
		settings.NodePortRange = contract.DefaultPortRange
	}
	cl := &cluster{
		settings: settings,
		client:   client,
		recorder: newRecorder(client),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[queueKey](200*time.Millisecond, settings.MaxBackoff),
			workqueue.TypedRateLimitingQueueConfig[queueKey]{Name: "npl-lbsync"}),
	}
	a := newApplier(cl, metrics.instrument(providers.Validated(provider)))
	trimmer := newTrimmer()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			a.recordMovesOf(pod)
		}
		return trimmer.trim(obj)
	}))

	svcInformer := factory.Core().V1().Services()
	podInformer := factory.Core().V1().Pods()
	nodeInformer := factory.Core().V1().Nodes()
	ingInformer := factory.Networking().V1().Ingresses()
	classInformer := factory.Networking().V1().IngressClasses()
	// Only the slices the EndpointSlice controller does not write: they
	// choose the Pods of Services without a selector.
	sliceInformer := factory.InformerFor(&discoveryv1.EndpointSlice{}, func(cl kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return discoveryinformers.NewFilteredEndpointSliceInformer(cl, metav1.NamespaceAll, resync, inputs.EndpointSliceIndexers(),
			func(o *metav1.ListOptions) { o.LabelSelector = contract.HandWrittenSlices })
	})
	utilruntime.Must(svcInformer.Informer().AddIndexers(inputs.ServiceIndexers()))
	utilruntime.Must(podInformer.Informer().AddIndexers(inputs.PodIndexers()))
	utilruntime.Must(ingInformer.Informer().AddIndexers(inputs.IngressIndexers()))
	cl.store = inputs.Store{
		Services: svcInformer.Informer().GetIndexer(), Pods: podInformer.Informer().GetIndexer(),
		Nodes:     nodeInformer.Informer().GetIndexer(),
		Ingresses: ingInformer.Informer().GetIndexer(), IngressClasses: classInformer.Informer().GetIndexer(),
		EndpointSlices: sliceInformer.GetIndexer(),
	}

	c := &Controller{
		cluster:   cl,
		metrics:   metrics,
		applier:   a,
		factory:   factory,
		svcLister: svcInformer.Lister(),
		services:  newServiceReconciler(cl, a, metrics, svcInformer.Lister()),
		ingresses: &ingressReconciler{cluster: cl, applier: a, lister: ingInformer.Lister()},
		gateways:  newGatewayReconciler(cl, a, providers.ModelCheckerOf(provider), providers.PolicyCapabilitiesOf(provider)),
		classes:   &gatewayClassReconciler{cluster: cl},
		policies:  &policyReconciler{cluster: cl},
		// The provider, not the metrics' wrapper of it: its own
		// capabilities (behind Validated when the registry opened it).
		policyCaps: providers.PolicyCapabilitiesOf(provider),
		synced: []cache.InformerSynced{svcInformer.Informer().HasSynced, podInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced,
			ingInformer.Informer().HasSynced, classInformer.Informer().HasSynced, sliceInformer.HasSynced},
	}
	c.reconcilers = []reconciler{c.services, c.ingresses, c.classes, c.gateways, c.policies}
	c.byKind = map[kind]reconciler{}
	for _, r := range c.reconcilers {
		for _, k := range r.kinds() {
			c.byKind[k] = r
		}
	}

	_, _ = svcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.services.serviceChanged,
		UpdateFunc: func(_, obj any) { c.writes.observed(obj); c.services.serviceChanged(obj) },
		DeleteFunc: c.services.serviceChanged,
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.services.podChanged(nil, obj) },
		UpdateFunc: c.services.podChanged,
		DeleteFunc: func(obj any) {
			c.services.podChanged(nil, obj)
			c.applier.entries.podDeleted(obj)
		},
	})
	_, _ = sliceInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.services.sliceChanged(nil, obj) },
		UpdateFunc: c.services.sliceChanged,
		DeleteFunc: func(obj any) { c.services.sliceChanged(nil, obj) },
	})
	_, _ = nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.nodesChanged() },
		UpdateFunc: c.nodeUpdated,
		DeleteFunc: func(any) { c.nodesChanged() },
	})
	_, _ = ingInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.ingresses.ingressChanged,
		UpdateFunc: func(old, obj any) { c.writes.observed(obj); c.ingresses.ingressUpdated(old, obj) },
		DeleteFunc: c.ingresses.ingressDeleted,
	})
	_, _ = classInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.ingresses.classChanged() },
		UpdateFunc: func(any, any) { c.ingresses.classChanged() },
		DeleteFunc: func(any) { c.ingresses.classChanged() },
	})
	metrics.setQueueDepth(func() float64 { return float64(c.queue.Len()) })
	return c
}

// newRecorder makes the Event recorder. Events name their objects by
// kind: its scheme knows Kubernetes' and Gateway API's.
func newRecorder(client kubernetes.Interface) record.EventRecorder {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	eventScheme := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(eventScheme))
	utilruntime.Must(gatewayv1.Install(eventScheme))
	return broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: "npl-lbsync"})
}

// Start runs the informers and waits for their caches. Followers call only
// this, so that a new leader starts with warm caches.
func (c *Controller) Start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	if g := c.gwState(); g != nil {
		g.run(ctx)
		g.factory.Start(ctx.Done())
	}
	if s := c.polState(); s != nil {
		s.run(ctx)
	}
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
	c.applier.pending.start(initial)
	logger.Info("Starting workers", "workers", c.settings.Workers, "keys", len(initial))
	var wg sync.WaitGroup
	for range c.settings.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	wg.Go(func() {
		// The first garbage collection waits for the first pass, so that
		// nothing a Service still claims is ever deleted.
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return c.applier.pending.done(), nil
		})
		if ctx.Err() != nil {
			return
		}
		c.applier.collectGarbage(ctx, c.claimedNames)
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
				c.applier.collectGarbage(ctx, c.claimedNames)
			}
		}
	})
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// queueAll queues every Service, Ingress, GatewayClass and Gateway and
// returns their keys; with force, the no-op skip is disabled for this pass
// so the provider compares with what the load balancer has.
func (c *Controller) queueAll(force bool) []queueKey {
	if force {
		c.applier.forceAll()
	}
	var keys []queueKey
	for _, r := range c.reconcilers {
		keys = append(keys, r.keys()...)
	}
	return c.queueKeys(keys)
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
	res := c.byKind[key.kind].sync(ctx, key)
	c.metrics.observeReconcile(time.Since(start), res.err)
	c.applier.pending.synced(key)
	if res.state == syncRetry {
		c.metrics.SyncFailures.Inc()
		klog.FromContext(ctx).Error(res.err, "Sync failed; will retry", "key", key)
		c.queue.AddRateLimited(key)
		return true
	}
	// Done, or refused until the objects change: nothing to retry.
	c.queue.Forget(key)
	return true
}

func keyOf(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// nodesChanged queues everything when a Node comes or goes: in NodePort
// mode nodes are the members, in NodePortLocal mode their addresses are
// those the annotation entries of their Pods may name.
func (c *Controller) nodesChanged() {
	if c.settings.ServiceType == builder.ServiceTypeClusterIP {
		return
	}
	c.queueAll(false)
}

func (c *Controller) nodeUpdated(oldObj, obj any) {
	old, ok1 := oldObj.(*corev1.Node)
	cur, ok2 := obj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	changed := nodeView(old) != nodeView(cur)
	if c.settings.ServiceType != builder.ServiceTypeNodePort {
		changed = !apiequality.Semantic.DeepEqual(old.Status.Addresses, cur.Status.Addresses)
	}
	if changed {
		c.nodesChanged()
	}
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

// claimedNames returns the names of the load balancers that a Service,
// an Ingress or a Gateway we serve (or still have to clean up) owns,
// computed once per garbage collection from the caches.
func (c *Controller) claimedNames() map[string]bool {
	names := map[string]bool{}
	for _, r := range c.reconcilers {
		r.claimed(names)
	}
	return names
}
