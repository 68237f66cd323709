package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// The agent fixture: one node with 110 Pods (the Kubernetes limit per node),
// 100 of them behind one Service of 10 ports, so the agent holds exactly
// 1000 mappings; the other 10 no Service selects.
const (
	agentNamespace = "bench-agent"
	servedPods     = 100
	portsPerPod    = 10
	idlePods       = 10
	firstPodPort   = 8080
	// podStartsPerOp is the Pod starts of one b.N iteration of
	// BenchmarkAgentPodStart: 3 iterations (make bench) give 201 samples.
	podStartsPerOp = 67
	// podStartInterval paces the Pod starts at 3.3 per second, under the 5
	// writes per second of the agent's API client (client-go's default):
	// back to back, the starts would measure that rate limiter, not the
	// agent.
	podStartInterval = 300 * time.Millisecond
	// agentPortRange leaves room for the Pods started while others stop.
	agentPortRange = "61000-62999"
)

var servedLabels = map[string]string{"app": "served"}

// agentFixture is npl-agent on the one node of a cluster with the kubelet
// stand-in, and the Pods above.
type agentFixture struct {
	e      *env
	node   *cluster.Node
	agent  *stack.Agent
	served []string // names of the served Pods, oldest first
	seq    int
	watch  *podWatch
}

// agentEnv returns the agent fixture, building it on first use.
func agentEnv(b *testing.B) *agentFixture {
	b.Helper()
	e := useCluster(b, "agent", cluster.Options{Nodes: 1})
	if e.agent != nil {
		return e.agent
	}
	began := time.Now()
	f := &agentFixture{e: e, node: e.c.Nodes()[0]}
	e.agent = f // closed with the cluster, also when the setup below fails
	if err := f.setup(); err != nil {
		if cerr := closeEnv(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		b.Fatalf("agent fixture: %v", err)
	}
	b.Logf("agent fixture: %d Pods, %d mappings on %s, built in %s", servedPods+idlePods, servedPods*portsPerPod,
		f.node.Name, time.Since(began).Round(time.Millisecond))
	return f
}

func (f *agentFixture) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := f.e.client
	if _, err := f.e.c.CreateNamespace(ctx, agentNamespace); err != nil {
		return err
	}
	agents, err := stack.StartAgents(ctx, f.e.c, stack.AgentOptions{
		PortRange: agentPortRange,
		// The production default: the drift check (an iptables-save of 1000
		// rules) stays off the measurements.
		CheckInterval: time.Minute,
	})
	if err != nil {
		return err
	}
	f.agent = agents[0]

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "served", Namespace: agentNamespace,
			Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{Selector: servedLabels},
	}
	for i := range portsPerPod {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "p" + strconv.Itoa(i), Port: int32(80 + i), Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromInt32(int32(firstPodPort + i)),
		})
	}
	if _, err := client.CoreV1().Services(agentNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service: %w", err)
	}
	if f.watch, err = startPodWatch(ctx, f.e, agentNamespace, portsPerPod); err != nil {
		return err
	}

	for range servedPods {
		f.served = append(f.served, f.nextName())
	}
	pods := make([]*corev1.Pod, 0, servedPods+idlePods)
	for _, name := range f.served {
		pods = append(pods, f.servedPod(name))
	}
	for i := range idlePods {
		p := f.servedPod(fmt.Sprintf("idle-%02d", i))
		p.Labels = map[string]string{"app": "idle"}
		pods = append(pods, p)
	}
	if err := parallel(len(pods), 8, func(i int) error {
		_, err := client.CoreV1().Pods(agentNamespace).Create(ctx, pods[i], metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create pods: %w", err)
	}
	if _, err := f.e.c.WaitForPods(ctx, agentNamespace, nil, servedPods+idlePods, true); err != nil {
		return err
	}
	// The agent patches annotations at its client's default rate (5/s).
	if err := pollUntil(3*time.Minute, time.Second, "every served Pod annotated", func() (bool, error) {
		n, err := f.annotatedPods(ctx)
		return n == servedPods, err
	}); err != nil {
		return fmt.Errorf("%w\n%s", err, f.agent.Tail(20))
	}
	return pollUntil(time.Minute, 200*time.Millisecond, "1000 DNAT rules", func() (bool, error) {
		n, err := f.dnatRules(ctx)
		return n == servedPods*portsPerPod, err
	})
}

func (f *agentFixture) close() error {
	if f.watch != nil {
		f.watch.stop()
	}
	if f.agent != nil {
		return f.agent.Stop()
	}
	return nil
}

func (f *agentFixture) nextName() string {
	f.seq++
	return fmt.Sprintf("served-%04d", f.seq)
}

// servedPod is a Pod of the node that listens on the Service's 10 target
// ports.
func (f *agentFixture) servedPod(name string) *corev1.Pod {
	c := corev1.Container{Name: "web", Image: "npl.io/test-server"}
	for i := range portsPerPod {
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(firstPodPort + i), Protocol: corev1.ProtocolTCP})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agentNamespace, Labels: servedLabels},
		Spec: corev1.PodSpec{
			NodeName:                      f.node.Name,
			Containers:                    []corev1.Container{c},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
}

// annotatedPods counts the served Pods whose annotation has every port.
func (f *agentFixture) annotatedPods(ctx context.Context) (int, error) {
	ann, err := f.annotations(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, entries := range ann {
		if len(entries) == portsPerPod {
			n++
		}
	}
	return n, nil
}

// annotations returns the parsed annotation of every served Pod by name.
func (f *agentFixture) annotations(ctx context.Context) (map[string][]contract.Entry, error) {
	return podAnnotations(ctx, f.e.client, agentNamespace, "app=served")
}

// podAnnotations returns the parsed annotation of every Pod of namespace
// that selector selects, by name; Pods without one are left out.
func podAnnotations(ctx context.Context, client kubernetes.Interface, namespace, selector string) (map[string][]contract.Entry, error) {
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[string][]contract.Entry{}
	for _, p := range list.Items {
		v, ok := p.Annotations[contract.PodKey]
		if !ok {
			continue
		}
		entries, err := contract.Parse(v)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		out[p.Name] = entries
	}
	return out, nil
}

// dnatRules counts the agent's DNAT mappings on the node in the datapath
// of its current backend: rules of its iptables chain, or elements of its
// nftables map.
func (f *agentFixture) dnatRules(ctx context.Context) (int, error) {
	if f.agent.Datapath() == string(datapath.BackendNFTables) {
		out, err := f.node.Command(ctx, "nft", "list", "map", "ip", datapath.TableName, "node-ports").CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "No such file or directory") {
				return 0, nil
			}
			return 0, fmt.Errorf("nft list map on %s: %w: %s", f.node.Name, err, out)
		}
		return len(nftMapElement.FindAllIndex(out, -1)), nil
	}
	out, err := f.node.Command(ctx, "iptables-save", "-t", "nat").Output()
	if err != nil {
		return 0, fmt.Errorf("iptables-save on %s: %w", f.node.Name, err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "-A "+datapath.ChainNodePortLocal+" ") && strings.Contains(line, "-j DNAT") {
			n++
		}
	}
	return n, nil
}

// podTimes is when the watch first saw a Pod with its IP, and with its full
// annotation.
type podTimes struct {
	ip        time.Time
	annotated time.Time
	entries   []contract.Entry
	done      chan struct{} // closed once annotated
}

// podWatch timestamps the Pod events of a namespace for the Pods it is told
// to expect.
type podWatch struct {
	entries int
	cancel  context.CancelFunc
	mu      sync.Mutex
	pods    map[string]*podTimes
}

func startPodWatch(ctx context.Context, e *env, ns string, entries int) (*podWatch, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &podWatch{entries: entries, cancel: cancel, pods: map[string]*podTimes{}}
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	observe := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			w.observe(p, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(wctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, errors.New("pod watch did not sync")
	}
	return w, nil
}

func (w *podWatch) stop() { w.cancel() }

// expect registers a Pod about to be created.
func (w *podWatch) expect(name string) *podTimes {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := &podTimes{done: make(chan struct{})}
	w.pods[name] = t
	return t
}

func (w *podWatch) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pods, name)
}

func (w *podWatch) observe(p *corev1.Pod, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.pods[p.Name]
	if t == nil || !t.annotated.IsZero() {
		return
	}
	if t.ip.IsZero() && p.Status.PodIP != "" {
		t.ip = now
	}
	v, ok := p.Annotations[contract.PodKey]
	if !ok || t.ip.IsZero() {
		return
	}
	if entries, err := contract.Parse(v); err == nil && len(entries) == w.entries {
		t.annotated, t.entries = now, entries
		close(t.done)
	}
}

// podStart is one measured Pod start.
type podStart struct {
	annotation time.Duration // Pod IP seen -> annotation seen
	rule       time.Duration // Pod IP seen -> every node port connects
}

// replaceOne deletes the oldest served Pod and, gap later, creates a new
// one, and measures the new one from its IP to its annotation and working
// rules.
func (f *agentFixture) replaceOne(ctx context.Context, gap time.Duration) (podStart, error) {
	pods := f.e.client.CoreV1().Pods(agentNamespace)
	victim := f.served[0]
	f.served = f.served[1:]
	err := pods.Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return podStart{}, fmt.Errorf("delete pod %s: %w", victim, err)
	}
	time.Sleep(gap)
	name := f.nextName()
	t := f.watch.expect(name)
	defer f.watch.forget(name)
	if _, err := pods.Create(ctx, f.servedPod(name), metav1.CreateOptions{}); err != nil {
		return podStart{}, fmt.Errorf("create pod %s: %w", name, err)
	}
	f.served = append(f.served, name)
	select {
	case <-t.done:
	case <-time.After(30 * time.Second):
		return podStart{}, fmt.Errorf("pod %s: no annotation with %d entries after 30s\n%s", name, portsPerPod, f.agent.Tail(10))
	}
	for _, e := range t.entries {
		if err := dialUntil(net.JoinHostPort(e.NodeIP, strconv.Itoa(e.NodePort)), 10*time.Second); err != nil {
			return podStart{}, fmt.Errorf("pod %s: %w", name, err)
		}
	}
	return podStart{annotation: t.annotated.Sub(t.ip), rule: time.Since(t.ip)}, nil
}

// dialUntil connects to addr from the test namespace until it succeeds.
func dialUntil(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connect to %s: %w", addr, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkAgentPodStart measures, on a node that keeps 110 Pods and 1000
// mappings, per datapath backend, how long after a new Pod's IP appears its
// NodePortLocal annotation appears (annotation-*) and its 10 node ports
// accept connections (rule-*), and the datapath writes per Pod replaced
// (writes/start). Each iteration replaces 67 Pods one after the other, one
// every 300 ms: it deletes the oldest and creates a new one, at once
// (churn, as a rolling update does: the new Pod's rules wait for the
// removal's write) or 150 ms later, once the removal is written (single).
// Target: p99 < 40 ms.
func BenchmarkAgentPodStart(b *testing.B) {
	for _, backend := range datapath.Backends {
		for _, bc := range []struct {
			name string
			gap  time.Duration // between the deletion and the creation
		}{{"churn", 0}, {"single", 150 * time.Millisecond}} {
			b.Run("backend="+string(backend)+"/"+bc.name, func(b *testing.B) {
				f := agentEnv(b)
				ctx := context.Background()
				if err := f.useBackend(ctx, backend); err != nil {
					b.Fatal(err)
				}
				_, writesBefore, err := f.datapathCounts()
				if err != nil {
					b.Fatal(err)
				}
				var annotations, rules []time.Duration
				var loads []float64
				ticker := time.NewTicker(podStartInterval)
				defer ticker.Stop()
				b.ResetTimer()
				for range b.N {
					loads = append(loads, loadAverage())
					for range podStartsPerOp {
						<-ticker.C
						s, err := f.replaceOne(ctx, bc.gap)
						if err != nil {
							b.Fatal(err)
						}
						annotations = append(annotations, s.annotation)
						rules = append(rules, s.rule)
					}
				}
				b.StopTimer()
				_, writesAfter, err := f.datapathCounts()
				if err != nil {
					b.Fatal(err)
				}
				reportLatency(b, "annotation", annotations)
				reportLatency(b, "rule", rules)
				b.ReportMetric(float64(len(rules)), "pod-starts")
				b.ReportMetric((writesAfter-writesBefore)/float64(len(rules)), "writes/start")
				b.ReportMetric(medianFloat(loads), "load1")
			})
		}
	}
}

// BenchmarkAgentMemory reads npl-agent's resident memory (MiB-rss), its
// high-water mark since it started (MiB-hwm, VmHWM) and its Go heap with
// 110 Pods and 1000 mappings on its node, after the Pod starts and restarts
// above when the benchmarks run in order. Target: RSS and VmHWM < 38 MiB.
func BenchmarkAgentMemory(b *testing.B) {
	f := agentEnv(b)
	var rss, hwm, heap, mappings float64
	for i := range b.N {
		if i > 0 {
			time.Sleep(time.Second)
		}
		r, err1 := f.agent.Metric("process_resident_memory_bytes")
		h, err2 := f.agent.Metric("go_memstats_heap_inuse_bytes")
		m, err3 := f.agent.Metric("npl_agent_mappings")
		w, err4 := f.highWaterMark()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			b.Fatal(err)
		}
		mappings = m
		rss, heap, hwm = max(rss, r), max(heap, h), max(hwm, w)
	}
	b.ReportMetric(rss/mib, "MiB-rss")
	b.ReportMetric(hwm/mib, "MiB-hwm")
	b.ReportMetric(heap/mib, "MiB-heap")
	b.ReportMetric(mappings, "mappings")
	b.ReportMetric(servedPods+idlePods, "pods")
	b.ReportMetric(loadAverage(), "load1")
}

// highWaterMark returns the agent's peak resident memory (VmHWM of
// /proc/PID/status), in bytes. The agent runs as a process of this machine
// in the node's network namespace; it is found by its command line: its
// node's name and a kubeconfig of this cluster (other clusters on the
// machine have nodes of the same name).
func (f *agentFixture) highWaterMark() (float64, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	clusterDir := filepath.Dir(f.e.c.Kubeconfig()) + "/"
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasSuffix(args[0], "/npl-agent") || !slices.Contains(args, f.node.Name) || slices.Contains(args, "cleanup") {
			continue
		}
		if i := slices.Index(args, "--kubeconfig"); i < 0 || i+1 == len(args) || !strings.HasPrefix(args[i+1], clusterDir) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", d.Name(), "status"))
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				return kb * 1024, err
			}
		}
		return 0, fmt.Errorf("no VmHWM in /proc/%s/status", d.Name())
	}
	return 0, fmt.Errorf("no npl-agent process of node %s", f.node.Name)
}

// BenchmarkAgentRestart restarts npl-agent with 1000 mappings on its node,
// per datapath backend, after flushing its mappings (the DNAT chain, or the
// nftables map, as a reboot or a lost table would) or with its rules kept,
// and measures from the process start to /readyz (ready-ms) and, after a
// flush, to the 1000 mappings back in the datapath (restore-ms). It counts
// the commands the datapath ran by then (execs: probes, reads and writes,
// the other backend's removal included), its writes, the node ports that
// changed in the annotations (port-changes, want 0) and the annotation
// patches the restarted agent made. Targets: 130 ms, 2 execs.
func BenchmarkAgentRestart(b *testing.B) {
	for _, backend := range datapath.Backends {
		for _, flush := range []bool{true, false} {
			name := "backend=" + string(backend) + "/rules=kept"
			if flush {
				name = "backend=" + string(backend) + "/rules=flushed"
			}
			b.Run(name, func(b *testing.B) { benchmarkAgentRestart(b, backend, flush) })
		}
	}
}

func benchmarkAgentRestart(b *testing.B, backend datapath.Backend, flush bool) {
	f := agentEnv(b)
	ctx := context.Background()
	if err := f.useBackend(ctx, backend); err != nil {
		b.Fatal(err)
	}
	want := servedPods * portsPerPod
	var ready, restored []time.Duration
	changes, patches, execs, writes := 0, 0.0, 0.0, 0.0
	var loads []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		before, err := f.annotations(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.agent.Stop(); err != nil {
			b.Fatal(err)
		}
		if flush {
			if err := f.flushMappings(ctx); err != nil {
				b.Fatal(err)
			}
		}
		loads = append(loads, loadAverage())
		b.StartTimer()

		start := time.Now()
		if err := f.agent.Start(ctx); err != nil {
			b.Fatal(err)
		}
		var readyAt, restoredAt time.Time
		var readyErr, restoreErr error
		var wg sync.WaitGroup
		wg.Go(func() { readyAt, readyErr = f.waitReady(30 * time.Second) })
		wg.Go(func() {
			restoreErr = pollUntil(30*time.Second, 5*time.Millisecond, fmt.Sprintf("%d DNAT rules", want), func() (bool, error) {
				n, err := f.dnatRules(ctx)
				return n == want, err
			})
			restoredAt = time.Now()
		})
		wg.Wait()
		b.StopTimer()
		if err := errors.Join(readyErr, restoreErr); err != nil {
			b.Fatalf("%v\n%s", err, f.agent.Tail(20))
		}
		ready = append(ready, readyAt.Sub(start))
		restored = append(restored, restoredAt.Sub(start))
		e, w, err := f.datapathCounts()
		if err != nil {
			b.Fatal(err)
		}
		execs, writes = execs+e, writes+w

		// Let the workers go through every Pod once before comparing.
		time.Sleep(2 * time.Second)
		after, err := f.annotations(ctx)
		if err != nil {
			b.Fatal(err)
		}
		changes += portChanges(before, after)
		p, err := f.agent.Metric("npl_agent_annotation_patches_total")
		if err != nil {
			b.Fatal(err)
		}
		patches += p
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(median(ready)), "ready-ms")
	if flush {
		b.ReportMetric(ms(median(restored)), "restore-ms")
	}
	b.ReportMetric(execs/float64(b.N), "execs")
	b.ReportMetric(writes/float64(b.N), "writes")
	b.ReportMetric(float64(changes)/float64(b.N), "port-changes")
	b.ReportMetric(patches/float64(b.N), "patches")
	b.ReportMetric(float64(want), "mappings")
	b.ReportMetric(medianFloat(loads), "load1")
}

// BenchmarkAgentColdStart starts npl-agent, per datapath backend, on a node
// whose 100 served Pods (10 ports each) and 10 idle ones are all there and
// none has node ports yet (no annotation, no rule: a first install), and
// measures from the process start to all 1000 mappings in the datapath
// (rules-ms), to the 100 full annotations (annotations-ms) and to both
// (coldstart-ms), with the datapath's writes and commands. Targets: 900
// ms, 10 writes.
func BenchmarkAgentColdStart(b *testing.B) {
	for _, backend := range datapath.Backends {
		b.Run("backend="+string(backend), func(b *testing.B) {
			f := agentEnv(b)
			ctx := context.Background()
			if err := f.useBackend(ctx, backend); err != nil {
				b.Fatal(err)
			}
			want := servedPods * portsPerPod
			var rules, annotated, both []time.Duration
			var loads []float64
			execs, writes := 0.0, 0.0
			for b.Loop() {
				b.StopTimer()
				if err := f.agent.Stop(); err != nil {
					b.Fatal(err)
				}
				if out, err := f.agent.Cleanup(ctx); err != nil {
					b.Fatalf("npl-agent cleanup: %v: %s", err, out)
				}
				if err := f.removeAnnotations(ctx); err != nil {
					b.Fatal(err)
				}
				loads = append(loads, loadAverage())
				b.StartTimer()
				start := time.Now()
				if err := f.agent.Start(ctx); err != nil {
					b.Fatal(err)
				}
				var rulesAt, annotatedAt time.Time
				var rulesErr, annErr error
				var wg sync.WaitGroup
				wg.Go(func() {
					rulesErr = pollUntil(30*time.Second, 5*time.Millisecond, fmt.Sprintf("%d mappings", want), func() (bool, error) {
						n, err := f.dnatRules(ctx)
						return n == want, err
					})
					rulesAt = time.Now()
				})
				wg.Go(func() {
					annErr = pollUntil(30*time.Second, 5*time.Millisecond, "every served Pod annotated", func() (bool, error) {
						n, err := f.annotatedPods(ctx)
						return n == servedPods, err
					})
					annotatedAt = time.Now()
				})
				wg.Wait()
				b.StopTimer()
				if err := errors.Join(rulesErr, annErr); err != nil {
					b.Fatalf("%v\n%s", err, f.agent.Tail(20))
				}
				rules = append(rules, rulesAt.Sub(start))
				annotated = append(annotated, annotatedAt.Sub(start))
				both = append(both, max(rulesAt.Sub(start), annotatedAt.Sub(start)))
				e, w, err := f.datapathCounts()
				if err != nil {
					b.Fatal(err)
				}
				execs, writes = execs+e, writes+w
				b.StartTimer()
			}
			n := float64(len(both))
			b.ReportMetric(ms(median(both)), "coldstart-ms")
			b.ReportMetric(ms(median(rules)), "rules-ms")
			b.ReportMetric(ms(median(annotated)), "annotations-ms")
			b.ReportMetric(writes/n, "writes")
			b.ReportMetric(execs/n, "execs")
			b.ReportMetric(medianFloat(loads), "load1")
		})
	}
}

// useBackend restarts the agent on backend unless it runs on it already,
// and waits until it holds every mapping again (untimed: the agent removes
// the other backend's rules and restores its mappings in its own).
func (f *agentFixture) useBackend(ctx context.Context, backend datapath.Backend) error {
	if f.agent.Datapath() == string(backend) && f.agent.Running() {
		return nil
	}
	if err := f.agent.Stop(); err != nil {
		return err
	}
	f.agent.SetDatapath(string(backend))
	if err := f.agent.Start(ctx); err != nil {
		return err
	}
	if err := f.agent.WaitReady(ctx); err != nil {
		return err
	}
	want := servedPods * portsPerPod
	return pollUntil(time.Minute, 50*time.Millisecond, fmt.Sprintf("%d mappings on %s", want, backend), func() (bool, error) {
		n, err := f.dnatRules(ctx)
		return n == want, err
	})
}

// flushMappings removes the agent's mappings by hand, as a reboot or a lost
// table would: it flushes the DNAT chain, or the nftables map.
func (f *agentFixture) flushMappings(ctx context.Context) error {
	args := []string{"iptables", "-w", "5", "-t", "nat", "-F", datapath.ChainNodePortLocal}
	if f.agent.Datapath() == string(datapath.BackendNFTables) {
		args = []string{"nft", "flush", "map", "ip", datapath.TableName, "node-ports"}
	}
	if out, err := f.node.Command(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	if n, err := f.dnatRules(ctx); err != nil || n != 0 {
		return fmt.Errorf("after the flush: %d mappings, err %v", n, err)
	}
	return nil
}

// removeAnnotations deletes the NodePortLocal annotation of every Pod of
// the fixture, as before a first install.
func (f *agentFixture) removeAnnotations(ctx context.Context) error {
	pods := f.e.client.CoreV1().Pods(agentNamespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"` + contract.PodKey + `":null}}}`)
	return parallel(len(list.Items), 8, func(i int) error {
		_, err := pods.Patch(ctx, list.Items[i].Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// datapathCounts reads the commands the agent's datapath ran and its
// writes. An agent built before npl_agent_datapath_commands_total counts
// only its own family's commands.
func (f *agentFixture) datapathCounts() (execs, writes float64, err error) {
	writes, err = f.agent.Metric("npl_agent_datapath_writes_total")
	if err != nil {
		return 0, 0, err
	}
	execs, err = f.agent.Metric("npl_agent_datapath_commands_total")
	if errors.Is(err, stack.ErrNoSample) {
		execs, err = f.agent.Metric("npl_agent_datapath_execs_total")
	}
	return execs, writes, err
}

// waitReady polls the agent's /readyz until it answers 200 and returns when.
func (f *agentFixture) waitReady(timeout time.Duration) (time.Time, error) {
	return waitOK(fmt.Sprintf("http://%s:%d/readyz", f.node.IP, stack.AgentHealthPort), timeout)
}

// waitOK polls url every 2 ms until it answers 200 and returns when.
func waitOK(url string, timeout time.Duration) (time.Time, error) {
	client := &http.Client{Timeout: time.Second}
	var at time.Time
	err := pollUntil(timeout, 2*time.Millisecond, url, func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		at = time.Now()
		return resp.StatusCode == http.StatusOK, nil
	})
	return at, err
}

// portChanges counts the entries of before whose node port differs in after
// (or that are gone from it).
func portChanges(before, after map[string][]contract.Entry) int {
	n := 0
	for pod, entries := range before {
		now := map[string]int{}
		for _, e := range after[pod] {
			now[fmt.Sprintf("%s/%d/%s", e.Protocol, e.PodPort, e.IPFamily)] = e.NodePort
		}
		for _, e := range entries {
			if now[fmt.Sprintf("%s/%d/%s", e.Protocol, e.PodPort, e.IPFamily)] != e.NodePort {
				n++
			}
		}
	}
	return n
}
