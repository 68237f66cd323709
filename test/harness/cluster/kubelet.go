package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// kubeletWorkers is how many Pods of one node are set up at once.
const kubeletWorkers = 4

var errPodGone = errors.New("the pod is gone or no longer running")

// kubelet stands in for the kubelet of one node: it runs the Pods bound to
// the node as network namespaces with built-in servers and writes their
// status. One key (namespace/name) is handled by one worker at a time.
type kubelet struct {
	c        *Cluster
	node     *Node
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	lister   corelisters.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]
	wg       sync.WaitGroup

	mu          sync.Mutex
	pods        map[string]*podRuntime
	terminating map[string]terminatingPod
	ipChanges   map[string][]*ipChange
}

// podRuntime is a Pod this kubelet runs.
type podRuntime struct {
	uid     types.UID
	netns   string // empty for hostNetwork Pods
	ip      netip.Addr
	ipv6    netip.Addr // in a dual-stack cluster only
	closers []io.Closer
	started time.Time
}

// terminatingPod records when the kubelet first saw a Pod being deleted.
type terminatingPod struct {
	uid   types.UID
	since time.Time
}

// ipChange is a ChangePodIP request; applied once the Pod has its new
// namespace, answered once the status carries the new IP.
type ipChange struct {
	applied bool
	done    chan ipChangeResult
}

type ipChangeResult struct {
	ip  netip.Addr
	err error
}

func newKubelet(c *Cluster, n *Node) *kubelet {
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", n.Name).String()
		}))
	pods := factory.Core().V1().Pods()
	return &kubelet{
		c:        c,
		node:     n,
		factory:  factory,
		informer: pods.Informer(),
		lister:   pods.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "npl-kubelet-" + n.Name}),
		pods:        map[string]*podRuntime{},
		terminating: map[string]terminatingPod{},
		ipChanges:   map[string][]*ipChange{},
	}
}

func (k *kubelet) start(ctx context.Context) error {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("kubelet of %s: watch pods: %w", k.node.Name, err)
	}
	k.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced) {
		return fmt.Errorf("kubelet of %s: pod cache did not sync", k.node.Name)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", k.node.Name))
	for range kubeletWorkers {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for k.processNext(ctx) {
			}
		}()
	}
	return nil
}

// stop ends the workers and the watch, then tears down every Pod.
func (k *kubelet) stop() {
	k.queue.ShutDown()
	k.wg.Wait()
	k.factory.Shutdown()
	k.mu.Lock()
	pods, changes := k.pods, k.ipChanges
	k.pods, k.ipChanges = map[string]*podRuntime{}, map[string][]*ipChange{}
	k.mu.Unlock()
	for _, rt := range pods {
		k.stopRuntime(rt)
	}
	for _, list := range changes {
		for _, ch := range list {
			ch.done <- ipChangeResult{err: errors.New("the cluster is closing")}
		}
	}
}

func (k *kubelet) processNext(ctx context.Context) bool {
	key, shutdown := k.queue.Get()
	if shutdown {
		return false
	}
	defer k.queue.Done(key)
	recheck, err := k.sync(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNoEchoBasic) {
			// Not transient: say it where a test's log shows it.
			klog.FromContext(ctx).Error(err, "Cannot run the pod", "pod", key)
		}
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Pod sync failed, will retry", "pod", key, "err", err)
			k.queue.AddRateLimited(key)
		}
		return true
	}
	k.queue.Forget(key)
	if recheck > 0 {
		k.queue.AddAfter(key, recheck)
	}
	return true
}

// sync makes one Pod's runtime and status match its object.
func (k *kubelet) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pod, err := k.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		k.teardown(ctx, key)
		k.mu.Lock()
		delete(k.terminating, key)
		k.mu.Unlock()
		k.answerIPChanges(key, ipChangeResult{err: errPodGone}, true)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if rt := k.runtime(key); rt != nil && rt.uid != pod.UID {
		// Deleted and created again under the same name.
		k.teardown(ctx, key)
	}
	if pod.DeletionTimestamp != nil {
		k.answerIPChanges(key, ipChangeResult{err: errPodGone}, true)
		return k.terminate(ctx, key, pod)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		k.answerIPChanges(key, ipChangeResult{err: errPodGone}, true)
		k.teardown(ctx, key)
		return 0, nil
	}
	rt := k.runtime(key)
	if rt == nil {
		if rt, err = k.run(ctx, pod); err != nil {
			return 0, fmt.Errorf("run pod %s: %w", key, err)
		}
	}
	if k.takeIPChange(key) {
		if err := k.moveToNewIP(ctx, pod, rt); err != nil {
			return 0, fmt.Errorf("change IP of pod %s: %w", key, err)
		}
	}
	if _, err := readinessDelay(pod, k.c.opts.ReadinessDelay); err != nil {
		klog.FromContext(ctx).Info("Ignoring annotation", "pod", key, "err", err)
	}
	status, recheck := kubeletStatus(pod, runningPod{
		hostIP: k.node.IP, hostIPv6: k.node.IPv6, podIP: rt.ip, podIPv6: rt.ipv6,
		started: rt.started, readinessDelay: k.c.opts.ReadinessDelay,
	}, time.Now())
	if !equality.Semantic.DeepEqual(status, pod.Status) {
		updated := pod.DeepCopy()
		updated.Status = status
		if _, err := k.c.client.CoreV1().Pods(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("update status of pod %s: %w", key, err)
		}
		klog.FromContext(ctx).V(3).Info("Wrote pod status", "pod", key, "ip", rt.ip)
	}
	k.answerIPChanges(key, ipChangeResult{ip: rt.ip}, false)
	return recheck, nil
}

// terminate keeps a deleted Pod running for TerminationDelay, then tears it
// down and removes the object, as a kubelet does once its containers stop.
func (k *kubelet) terminate(ctx context.Context, key string, pod *corev1.Pod) (time.Duration, error) {
	now := time.Now()
	k.mu.Lock()
	t, ok := k.terminating[key]
	if !ok || t.uid != pod.UID {
		t = terminatingPod{uid: pod.UID, since: now}
		k.terminating[key] = t
	}
	k.mu.Unlock()
	delay := k.c.opts.TerminationDelay
	if v, ok := pod.Annotations[AnnotationTerminationDelay]; ok {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			delay = d
		}
	}
	if remaining := delay - now.Sub(t.since); remaining > 0 {
		return remaining, nil
	}
	k.teardown(ctx, key)
	err := k.c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	// Conflict: the precondition failed, this Pod is already gone.
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return 0, fmt.Errorf("delete pod %s: %w", key, err)
	}
	return 0, nil
}

// netnsOf returns the namespace of a running Pod, "" if none.
func (k *kubelet) netnsOf(key string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rt := k.pods[key]; rt != nil {
		return rt.netns
	}
	return ""
}

func (k *kubelet) runtime(key string) *podRuntime {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pods[key]
}

// run starts a Pod: a network namespace with an address of the node's Pod
// CIDR and the Pod's servers; hostNetwork Pods just get the node IP.
func (k *kubelet) run(ctx context.Context, pod *corev1.Pod) (*podRuntime, error) {
	rt := &podRuntime{uid: pod.UID, ip: k.node.IP, ipv6: k.node.IPv6, started: time.Now()}
	if !pod.Spec.HostNetwork {
		if err := k.startSandbox(ctx, pod, rt); err != nil {
			return nil, err
		}
	}
	k.mu.Lock()
	k.pods[cache.MetaObjectToName(pod).String()] = rt
	k.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Started pod", "pod", klog.KObj(pod), "ip", rt.ip, "ipv6", rt.ipv6, "netns", rt.netns)
	return rt, nil
}

// startSandbox gives rt a new namespace, address (two in a dual-stack
// cluster) and servers: the built-in ones for declared ports, a DNS server
// for a container of CoreDNSImage, and a process for each container of
// EchoBasicImage.
func (k *kubelet) startSandbox(ctx context.Context, pod *corev1.Pod, rt *podRuntime) error {
	ip, err := k.node.ips.allocate()
	if err != nil {
		return err
	}
	ipv6 := k.node.podIPv6(ip)
	seq := k.c.podSeq.Add(1)
	netns := fmt.Sprintf("npl-%s-p%d", k.c.runID, seq)
	fail := func(err error) error {
		_ = deleteNetns(netns)
		k.node.ips.release(ip)
		return err
	}
	if err := addNetns(ctx, netns); err != nil {
		return fail(err)
	}
	hostVeth := fmt.Sprintf("vp%d", seq)
	if err := ipBatch(ctx, k.node.Netns,
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", hostVeth, netns),
		fmt.Sprintf("link set %s master cbr0", hostVeth),
		// Hairpin mode, as the bridge CNI plugin sets it (hairpinMode:
		// true): with bridge netfilter on, a Pod's packet DNATed back to
		// the Pod itself is bridged out the port it came in on.
		fmt.Sprintf("link set %s type bridge_slave hairpin on", hostVeth),
		fmt.Sprintf("link set %s up", hostVeth),
	); err != nil {
		return fail(err)
	}
	lines := []string{
		"link set lo up",
		fmt.Sprintf("addr add %s/%d dev eth0", ip, k.node.PodCIDR.Bits()),
		"link set eth0 up",
		fmt.Sprintf("route add default via %s dev eth0 onlink", k.node.gateway()),
	}
	if ipv6.IsValid() {
		lines = append(lines,
			fmt.Sprintf("addr add %s/%d dev eth0 nodad", ipv6, k.node.PodCIDRv6.Bits()),
			fmt.Sprintf("route add ::/0 via %s dev eth0 onlink", k.node.gatewayV6()),
		)
	}
	if err := ipBatch(ctx, netns, lines...); err != nil {
		return fail(err)
	}
	closers, err := startPodServers(netnsPath(netns), pod, ipv6.IsValid())
	if err != nil {
		return fail(err)
	}
	dnsClosers, err := startPodDNS(netnsPath(netns), pod, ipv6.IsValid())
	if err != nil {
		for _, c := range closers {
			_ = c.Close()
		}
		return fail(err)
	}
	closers = append(closers, dnsClosers...)
	procs, err := startPodProcesses(ctx, k.c.client, k.c.opts.BinDir, k.c.cp.logDir, pod, sandbox{
		netns: netns, dir: filepath.Join(k.c.dir, "pods", netns), podIP: ip, hostIP: k.node.IP,
	})
	if err != nil {
		for _, c := range closers {
			_ = c.Close()
		}
		return fail(err)
	}
	closers = append(closers, procs...)
	k.mu.Lock() // PodNetns reads these
	rt.netns, rt.ip, rt.ipv6, rt.closers = netns, ip, ipv6, closers
	k.mu.Unlock()
	return nil
}

// moveToNewIP builds a new namespace with a new address and servers, then
// removes the old one: the new IP always differs from the old.
func (k *kubelet) moveToNewIP(ctx context.Context, pod *corev1.Pod, rt *podRuntime) error {
	if rt.netns == "" {
		return errors.New("it uses the host network")
	}
	old := *rt
	if err := k.startSandbox(ctx, pod, rt); err != nil {
		return err
	}
	k.stopRuntime(&old)
	klog.FromContext(ctx).V(2).Info("Changed pod IP", "pod", klog.KObj(pod), "old", old.ip, "new", rt.ip)
	return nil
}

// teardown stops a Pod's servers and removes its namespace.
func (k *kubelet) teardown(ctx context.Context, key string) {
	k.mu.Lock()
	rt := k.pods[key]
	delete(k.pods, key)
	k.mu.Unlock()
	if rt != nil {
		k.stopRuntime(rt)
		klog.FromContext(ctx).V(2).Info("Stopped pod", "pod", key, "netns", rt.netns)
	}
}

func (k *kubelet) stopRuntime(rt *podRuntime) {
	for _, c := range rt.closers {
		_ = c.Close()
	}
	if rt.netns == "" {
		return
	}
	if err := deleteNetns(rt.netns); err != nil {
		k.c.log.Error(err, "Cannot remove a pod network namespace", "netns", rt.netns)
	}
	k.node.ips.release(rt.ip)
}

// changePodIP asks the worker that owns the Pod to move it to a new IP and
// waits for the status that carries it.
func (k *kubelet) changePodIP(ctx context.Context, key string) (netip.Addr, error) {
	ch := &ipChange{done: make(chan ipChangeResult, 1)}
	k.mu.Lock()
	k.ipChanges[key] = append(k.ipChanges[key], ch)
	k.mu.Unlock()
	k.queue.Add(key)
	select {
	case r := <-ch.done:
		return r.ip, r.err
	case <-ctx.Done():
		k.mu.Lock()
		list := k.ipChanges[key]
		for i, c := range list {
			if c == ch {
				k.ipChanges[key] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		k.mu.Unlock()
		return netip.Addr{}, ctx.Err()
	}
}

// takeIPChange reports whether a request waits for a new IP, and marks the
// waiting requests as served by the move about to happen.
func (k *kubelet) takeIPChange(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	pending := false
	for _, ch := range k.ipChanges[key] {
		if !ch.applied {
			ch.applied, pending = true, true
		}
	}
	return pending
}

// answerIPChanges answers the applied requests (all of them when all is set).
func (k *kubelet) answerIPChanges(key string, r ipChangeResult, all bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var keep []*ipChange
	for _, ch := range k.ipChanges[key] {
		if ch.applied || all {
			ch.done <- r
		} else {
			keep = append(keep, ch)
		}
	}
	if len(keep) == 0 {
		delete(k.ipChanges, key)
	} else {
		k.ipChanges[key] = keep
	}
}
