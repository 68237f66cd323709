// Package controller is npl-agent's control loop: it watches the node's own
// Pods, all Services, the hand-written EndpointSlices (which choose the Pods
// of Services without a selector) and its Node, decides which Pod ports to publish
// (Targets), allocates node ports (portalloc), programs the datapath and
// writes the Pod annotation. It restores every valid mapping from the Pods'
// annotations before its workers start, so node ports survive a restart.
package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/kubeapi"
	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/contract"
)

// exhaustedRetry is the fallback retry of a Pod that could not get every node
// port. It is slow on purpose: such a Pod is woken as soon as a port frees,
// and the fallback only covers a port freed by a host process.
const exhaustedRetry = 30 * time.Second

// Config configures the controller.
type Config struct {
	NodeName         string
	PortRange        portalloc.Range
	NodeIPPreference []corev1.NodeAddressType
	// Workers is the number of Pods synced in parallel.
	Workers int
	// ResyncPeriod re-queues every local Pod; 0 disables it. The datapath
	// repairs itself independently.
	ResyncPeriod time.Duration
	// RetiredPortGrace keeps, after a restart with a port range that no
	// longer holds a running Pod's node port, the rule of that old port
	// this long beside the Pod's new mapping, so that a load balancer still
	// sending to the old address until it reads the new annotation loses
	// nothing (make before break); 0 drops the old rule at the restart.
	RetiredPortGrace time.Duration
}

// Datapath is what the controller needs from a family's datapath: program a
// whole desired state and wait until it is written, and flush UDP state.
type Datapath interface {
	// Update hands over the complete desired content and returns a
	// generation to wait for.
	Update(d datapath.Desired) uint64
	// Wait blocks until generation gen (or a later one) is written.
	Wait(ctx context.Context, gen uint64) error
	// FlushUDP removes the conntrack entries of a UDP node port.
	FlushUDP(ctx context.Context, nodePort int) error
}

// Allocator is the node-port allocator (portalloc.Allocator).
type Allocator interface {
	Allocate(key portalloc.Key) (int, error)
	Restore(key portalloc.Key, nodePort int) error
	Release(key portalloc.Key) error
	Keys(pod string) []portalloc.Key
	Lookup(key portalloc.Key) (int, bool)
	Hold(key portalloc.Key, nodePort int) (io.Closer, error)
}

// mapping is one published port of a Pod.
type mapping struct {
	target   Target
	nodePort int
	podIP    netip.Addr
}

// retiredMapping is a mapping of a Pod, keyed by namespace/name, on a node
// port outside the range (Config.RetiredPortGrace), and the socket that
// holds its port while its rule is kept.
type retiredMapping struct {
	key string
	mapping
	hold io.Closer
}

// release closes the socket of a retired mapping whose rule goes.
func (r retiredMapping) release(logger klog.Logger) {
	if err := r.hold.Close(); err != nil {
		// The descriptor is freed either way.
		logger.Error(err, "Close the socket of a retired node port", "pod", r.key, "nodePort", r.nodePort)
	}
}

// podState is what the agent has published for one Pod, keyed by namespace/name.
type podState struct {
	mappings []mapping
}

// Controller reconciles the node's Pods.
type Controller struct {
	cfg      Config
	client   kubeapi.Interface
	alloc    Allocator
	paths    map[contract.Family]Datapath
	recorder record.EventRecorder
	metrics  *Metrics

	informers  []cache.SharedIndexInformer
	podLister  corelisters.PodLister
	svcIndexer cache.Indexer
	epsIndexer cache.Indexer
	nodeLister corelisters.NodeLister
	// synced are done once the caches hold their first lists: waited for
	// without polling (cache.WaitForCacheSync looks every 100 ms, a third of
	// a restart).
	synced []cache.DoneChecker

	queue workqueue.TypedRateLimitingInterface[string]
	// queuedMu guards queuedAt: when each queued Pod was first queued since
	// a worker last took it, for the time it waited (logged with its sync).
	queuedMu sync.Mutex
	queuedAt map[string]time.Time

	mu   sync.Mutex
	pods map[string]*podState
	// retired are the mappings of old node ports outside the range that
	// restore keeps until RetiredPortGrace has passed; the datapath
	// programs them, no annotation lists them.
	retired []retiredMapping
	nodeIPs map[contract.Family]netip.Addr
	starved map[string]bool // Pods waiting for free ports
	// pendingSent is the AdditionsPending of the last datapath update.
	pendingSent bool
	ready       bool
}

// New builds the controller and its informers. Nothing runs until Run.
func New(cfg Config, client kubeapi.Interface, alloc Allocator, paths map[contract.Family]Datapath, metrics *Metrics) *Controller {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(client.Events())
	recorder := broadcaster.NewRecorder(kubeapi.Scheme, corev1.EventSource{Component: "npl-agent", Host: cfg.NodeName})

	c := &Controller{
		cfg:      cfg,
		client:   client,
		alloc:    alloc,
		paths:    paths,
		recorder: recorder,
		metrics:  metrics,
		// Per-Pod backoff from 100 ms capped at 30 s: retries never stop, and
		// a transient error (xtables lock, apiserver) recovers quickly.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "npl-agent"}),
		pods:     map[string]*podState{},
		nodeIPs:  map[contract.Family]netip.Addr{},
		starved:  map[string]bool{},
		queuedAt: map[string]time.Time{},
	}

	podInformer := c.informer(kubeapi.Pods, &corev1.Pod{}, cfg.ResyncPeriod, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}, TrimPod)
	svcInformer := c.informer(kubeapi.Services, &corev1.Service{}, 0, nil, TrimService)
	nodeInformer := c.informer(kubeapi.Nodes, &corev1.Node{}, 0, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	}, TrimNode)
	epsInformer := c.informer(kubeapi.EndpointSlices, &discoveryv1.EndpointSlice{}, 0, func(o *metav1.ListOptions) {
		o.LabelSelector = contract.HandWrittenSlices
	}, TrimEndpointSlice)
	c.podLister = corelisters.NewPodLister(podInformer.GetIndexer())
	c.nodeLister = corelisters.NewNodeLister(nodeInformer.GetIndexer())
	c.svcIndexer = svcInformer.GetIndexer()
	c.epsIndexer = epsInformer.GetIndexer()

	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueuePod(obj) },
		UpdateFunc: func(_, obj any) { c.enqueuePod(obj) },
		DeleteFunc: func(obj any) { c.enqueuePod(obj) },
	})
	_, _ = svcInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueServicePods(nil, obj) },
		UpdateFunc: func(old, obj any) { c.enqueueServicePods(old, obj) },
		DeleteFunc: func(obj any) { c.enqueueServicePods(nil, obj) },
	})
	_, _ = epsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueSlicePods(nil, obj) },
		UpdateFunc: func(old, obj any) { c.enqueueSlicePods(old, obj) },
		DeleteFunc: func(obj any) { c.enqueueSlicePods(nil, obj) },
	})
	_, _ = nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.nodeChanged(obj) },
		UpdateFunc: func(_, obj any) { c.nodeChanged(obj) },
	})
	for _, inf := range c.informers {
		c.synced = append(c.synced, inf.HasSyncedChecker())
	}
	return c
}

// informer returns a new informer of r in all namespaces, indexed by
// namespace, whose lists and watches tweak selects and whose cache holds
// what trim keeps of each object, as client-go's informer factory makes
// them; Run starts it.
func (c *Controller) informer(r kubeapi.Resource, obj runtime.Object, resync time.Duration, tweak func(*metav1.ListOptions), trim cache.TransformFunc) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(c.client.ListWatch(r, tweak), obj, cache.SharedIndexInformerOptions{
		ResyncPeriod: resync,
		Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	// Only fails once the informer runs.
	utilruntime.Must(inf.SetTransform(trim)) // fails only on a started informer
	c.informers = append(c.informers, inf)
	return inf
}

// Ready reports whether the initial restore is done and workers run.
func (c *Controller) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// Run starts the informers, waits for their caches and a Node IP, restores
// the mappings from annotations, then runs the workers until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()

	for _, inf := range c.informers {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitFor(ctx, "", c.synced...) {
		return fmt.Errorf("wait for informer caches: %w", ctx.Err())
	}
	if err := c.waitForNodeIP(ctx); err != nil {
		return err
	}
	if err := c.restore(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	logger.Info("Starting workers", "workers", c.cfg.Workers, "node", c.cfg.NodeName)

	pods, err := c.podLister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for _, p := range pods {
		c.enqueue(keyOf(p))
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) waitForNodeIP(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		node, err := c.nodeLister.Get(c.cfg.NodeName)
		if err != nil {
			logger.Info("Waiting for the Node object", "node", c.cfg.NodeName, "err", err)
			return false, nil
		}
		ips := NodeIPs(node, c.cfg.NodeIPPreference)
		if len(ips) == 0 {
			logger.Info("Waiting for an address on the Node", "node", c.cfg.NodeName)
			return false, nil
		}
		c.mu.Lock()
		c.nodeIPs = ips
		c.mu.Unlock()
		return true, nil
	})
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
	c.queuedMu.Lock()
	queued, ok := c.queuedAt[key]
	delete(c.queuedAt, key)
	c.queuedMu.Unlock()
	if !ok {
		queued = start // a retry: its wait is the backoff
	}
	err := c.syncPod(ctx, key, start.Sub(queued))
	c.metrics.observeSync(time.Since(start), err)
	switch {
	case err == nil:
		c.queue.Forget(key)
	case errors.Is(err, portalloc.ErrExhausted):
		// Retried as soon as a port frees (syncPod wakes the starved Pods
		// when it releases one), and slowly meanwhile.
		c.queue.AddAfter(key, exhaustedRetry)
	default:
		klog.FromContext(ctx).Error(err, "Sync failed; will retry", "pod", key)
		c.queue.AddRateLimited(key)
	}
	return true
}

// enqueue queues a Pod's key and notes when, unless it is queued already.
func (c *Controller) enqueue(key string) {
	c.queuedMu.Lock()
	if _, ok := c.queuedAt[key]; !ok {
		c.queuedAt[key] = time.Now()
	}
	c.queuedMu.Unlock()
	c.queue.Add(key)
}

func keyOf(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

func (c *Controller) enqueuePod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.enqueue(d.Key)
		return
	}
	if p, ok := obj.(*corev1.Pod); ok {
		c.enqueue(keyOf(p))
	}
}

// enqueueServicePods queues the Pods a Service selects now or selected
// before the change, so both the gaining and the losing side are synced.
func (c *Controller) enqueueServicePods(oldObj, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	if old, ok := oldObj.(*corev1.Service); ok && !serviceChangeMatters(old, svc) {
		return
	}
	c.enqueueSelected(svc)
	if old, ok := oldObj.(*corev1.Service); ok {
		c.enqueueSelected(old)
	}
}

func (c *Controller) enqueueSelected(svc *corev1.Service) {
	if len(svc.Spec.Selector) == 0 {
		for _, s := range c.slicesInNamespace(svc.Namespace) {
			if contract.SliceService(s) == svc.Name {
				c.enqueueNamed(s.Namespace, contract.SlicePods(s))
			}
		}
		return
	}
	pods, err := c.podLister.Pods(svc.Namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return
	}
	for _, p := range pods {
		c.enqueue(keyOf(p))
	}
}

// enqueueSlicePods queues the Pods an EndpointSlice references now or
// referenced before the change. Pods of other nodes are not in the lister.
func (c *Controller) enqueueSlicePods(oldObj, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	for _, o := range []any{oldObj, obj} {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			c.enqueueNamed(s.Namespace, contract.SlicePods(s))
		}
	}
}

// enqueueNamed queues the local Pods of ns among names.
func (c *Controller) enqueueNamed(ns string, names []string) {
	for _, name := range names {
		if p, err := c.podLister.Pods(ns).Get(name); err == nil {
			c.enqueue(keyOf(p))
		}
	}
}

func (c *Controller) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	ips := NodeIPs(node, c.cfg.NodeIPPreference)
	c.mu.Lock()
	changed := !equalIPs(ips, c.nodeIPs)
	if changed && len(ips) > 0 {
		c.nodeIPs = ips
	}
	ready := c.ready
	c.mu.Unlock()
	if changed && ready {
		pods, _ := c.podLister.List(labels.Everything())
		for _, p := range pods {
			c.enqueue(keyOf(p))
		}
	}
}

func equalIPs(a, b map[contract.Family]netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// servicesInNamespace returns the cached Services of a namespace.
func (c *Controller) servicesInNamespace(ns string) []*corev1.Service {
	objs, err := c.svcIndexer.ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Service, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			out = append(out, s)
		}
	}
	return out
}

// slicesInNamespace returns the cached hand-written EndpointSlices of a
// namespace.
func (c *Controller) slicesInNamespace(ns string) []*discoveryv1.EndpointSlice {
	objs, err := c.epsIndexer.ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	return out
}

// annotationEntries renders a Pod's mappings as annotation entries; none
// when st is nil.
func (c *Controller) annotationEntries(st *podState) []contract.Entry {
	if st == nil {
		return nil
	}
	entries := make([]contract.Entry, 0, len(st.mappings))
	for _, m := range st.mappings {
		nodeIP, ok := c.nodeIPs[m.target.Family]
		if !ok {
			continue
		}
		entries = append(entries, contract.Entry{
			PodPort:  int(m.target.PodPort),
			NodeIP:   nodeIP.String(),
			NodePort: m.nodePort,
			Protocol: m.target.Protocol,
			IPFamily: m.target.Family,
		})
	}
	contract.Sort(entries)
	return entries
}
