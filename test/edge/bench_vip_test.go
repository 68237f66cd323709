package edge

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/providers"
)

// percentile is the p-th percentile (0 < p <= 100) of sorted ds, in ms.
func percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	i := (len(ds)*p + 99) / 100
	return float64(ds[max(i-1, 0)].Microseconds()) / 1000
}

// readyWatch records when each Pod of a namespace is first seen Ready
// through a watch, and when first seen with its NodePortLocal annotation.
// A watch the API server ends is opened again from the last version seen.
type readyWatch struct {
	mu          sync.Mutex
	readyAt     map[string]time.Time
	annotatedAt map[string]time.Time
	cancel      context.CancelFunc
	done        chan struct{}
}

func watchReady(ctx context.Context, client kubernetes.Interface, ns, selector string) (*readyWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	rw := &readyWatch{readyAt: map[string]time.Time{}, annotatedAt: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	open := func(rv string) (watch.Interface, error) {
		return client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
	}
	w, err := open("")
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(rw.done)
		rv := ""
		for {
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					// An error event (the version is too old): start over.
					rv = ""
					continue
				}
				rv = p.ResourceVersion
				if p.DeletionTimestamp != nil {
					continue
				}
				now := time.Now()
				rw.mu.Lock()
				if _, seen := rw.annotatedAt[p.Name]; !seen && p.Annotations[contract.PodKey] != "" {
					rw.annotatedAt[p.Name] = now
				}
				for _, c := range p.Status.Conditions {
					if _, seen := rw.readyAt[p.Name]; !seen && c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						rw.readyAt[p.Name] = now
					}
				}
				rw.mu.Unlock()
			}
			for {
				if ctx.Err() != nil {
					return
				}
				if w, err = open(rv); err == nil {
					break
				}
				rv = ""
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return rw, nil
}

func (rw *readyWatch) stop() {
	rw.cancel()
	<-rw.done
}

// firstAnswers sends requests to url from the client namespace, workers at
// a time, until stop or maxDuration, and records when each Pod first
// answered.
type firstAnswers struct {
	mu       sync.Mutex
	first    map[string]time.Time
	ok, fail int
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startFirstAnswers(ctx context.Context, b *Bed, url string, workers int, maxDuration time.Duration) *firstAnswers {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	fa := &firstAnswers{first: map[string]time.Time{}, cancel: cancel}
	c := b.ClientHTTP(3 * time.Second)
	for range workers {
		fa.wg.Add(1)
		go func() {
			defer fa.wg.Done()
			for ctx.Err() == nil {
				body, err := Get(ctx, c, url)
				now := time.Now()
				if ctx.Err() != nil {
					return
				}
				fa.mu.Lock()
				if err != nil {
					fa.fail++
				} else {
					fa.ok++
					if name := strings.TrimSpace(body); fa.first[name].IsZero() {
						fa.first[name] = now
					}
				}
				fa.mu.Unlock()
			}
		}()
	}
	return fa
}

// serversUp polls the edge's HAProxy every 10 ms and records when each
// server of backend is first up and enabled: the control path's share of
// the time to the first request, without the stream's sampling.
type serversUp struct {
	mu      sync.Mutex
	first   map[string]time.Time
	present map[string]time.Time
	cancel  context.CancelFunc
	done    chan struct{}
}

func startServersUp(ctx context.Context, e *EdgeHost, backend string) *serversUp {
	ctx, cancel := context.WithCancel(ctx)
	su := &serversUp{first: map[string]time.Time{}, present: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(su.done)
		for ctx.Err() == nil {
			sts, err := haproxy.ShowServersState(ctx, e.AdminSocket())
			now := time.Now()
			if err == nil {
				su.mu.Lock()
				for _, st := range sts {
					if st.Backend == backend && su.present[st.Name].IsZero() {
						su.present[st.Name] = now
					}
					if st.Backend == backend && st.Up && st.Enabled() && su.first[st.Name].IsZero() {
						su.first[st.Name] = now
					}
				}
				su.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return su
}

func (su *serversUp) Stop() {
	su.cancel()
	<-su.done
}

func (fa *firstAnswers) Stop() {
	fa.cancel()
	fa.wg.Wait()
}

// podTimeline is one Pod's way to its first request, from Ready.
type podTimeline struct {
	pod                         string
	annotated, added, up, first time.Duration
}

func (t podTimeline) String() string {
	return fmt.Sprintf("%s: annotated %v, server added %v, up %v, first request %v after Ready", t.pod,
		t.annotated.Round(time.Millisecond), t.added.Round(time.Millisecond), t.up.Round(time.Millisecond), t.first.Round(time.Millisecond))
}

// BenchmarkEdge_podReadyToVIP measures, end to end (npl-agent on 3 nodes,
// npl-lbsync with the haproxy provider, npl-edge and HAProxy), the time from
// a Pod seen Ready (through a watch) until the first request to the VIP,
// from a stream from the client namespace, lands on it: per iteration a
// Deployment scales from 1 to 101 Pods in steps of 10, then back to 1. It
// reports p50 and p99 over the 100 Pods of every iteration, the stream's
// rate and its failed requests, and where the time goes, each from Ready:
// annotated-p50/p99 until the Pod carries npl-agent's annotation (its node
// port programmed; the stand-in kubelet makes a Pod Ready as it gets its
// IP, so npl-agent's whole path comes after Ready here), added-p50/p99
// until HAProxy has the Pod's server (its runtime state polled every
// 10 ms), member-p50/p99 until that server is up. lbsync-p50/p99 are the
// times from when the member may be added (the later of Ready and the
// annotation) until the server exists, npl-lbsync's and the edge's share
// (not with the gate); sampling-p50/p99 from the server up until the
// stream's first request lands on it (HAProxy's round robin gives a new
// server its first request at the end of the current round: among n
// members it waits up to n/rate). The five slowest Pods' timelines are
// logged. On a busy machine the watch that times Ready and the annotation
// may see them late, which shortens what is timed from them.
func BenchmarkEdge_podReadyToVIP(b *testing.B) { podReadyToVIP(b, "bench-ready", false) }

// BenchmarkEdge_podReadyToVIPWithGate is BenchmarkEdge_podReadyToVIP with
// the npl.io/lb-registered readiness gate on the Pods: npl-lbsync adds a
// Pod's member once its containers are ready, and the Pod turns Ready only
// once the edge has applied it, so Ready means "served by the VIP" and the
// time to the first request is the stream's sampling (a first request
// before Ready counts as 0).
func BenchmarkEdge_podReadyToVIPWithGate(b *testing.B) { podReadyToVIP(b, "bench-gate", true) }

func podReadyToVIP(b *testing.B, lbsync string, gate bool) {
	const pods, step = 100, 10
	c, bed := clusterBed(b)
	startLBSync(b, c, bed, lbsync)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(b)
	d := webDeployment(ns, "web", 1)
	if gate {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "web", lbsync), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var vip string
	waitForCond(b, 90*time.Second, "the Service's VIP", func() (bool, error) {
		s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return true, nil
	})
	url := URL(vip, 80)
	scaleAndConverge(b, client, bed, ns, "web", url, 1)
	rw, err := watchReady(ctx, client, ns, "app=web")
	if err != nil {
		b.Fatal(err)
	}
	defer rw.stop()

	var lat, member, present, annotated, applied, sampled []time.Duration
	var timelines []podTimeline
	pool := providers.PoolName(providers.LoadBalancerName(lbsync, ns, "web"), providers.TCP, 80)
	var requests, failed int
	var streamTime time.Duration
	b.ResetTimer()
	for range b.N {
		before, err := readyPods(ctx, client, ns, "web")
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		su := startServersUp(ctx, bed.Edges[0], pool)
		fa := startFirstAnswers(ctx, bed, url, 8, 5*time.Minute)
		for n := 1 + step; n <= 1+pods; n += step {
			patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
			if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				b.Fatal(err)
			}
			waitForCond(b, 2*time.Minute, fmt.Sprintf("%d Pods ready and answering through the VIP", n), func() (bool, error) {
				ready, err := readyPods(ctx, client, ns, "web")
				if err != nil || len(ready) != n {
					return false, err
				}
				fa.mu.Lock()
				defer fa.mu.Unlock()
				for _, p := range ready {
					if fa.first[p].IsZero() {
						return false, fmt.Errorf("%s has not answered yet", p)
					}
				}
				return true, nil
			})
		}
		fa.Stop()
		su.Stop()
		streamTime += time.Since(start)
		requests, failed = requests+fa.ok+fa.fail, failed+fa.fail
		after, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			b.Fatal(err)
		}
		rw.mu.Lock()
		for _, p := range after.Items {
			if slices.Contains(before, p.Name) || p.DeletionTimestamp != nil {
				continue
			}
			ready := rw.readyAt[p.Name]
			if ready.IsZero() || rw.annotatedAt[p.Name].IsZero() {
				b.Fatalf("pod %s answered, but the watch never saw it Ready and annotated", p.Name)
			}
			es, err := contract.Parse(p.Annotations[contract.PodKey])
			if err != nil || len(es) != 1 {
				b.Fatalf("pod %s: annotation %q", p.Name, p.Annotations[contract.PodKey])
			}
			server := haproxy.ServerName(providers.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort)})
			if su.first[server].IsZero() {
				b.Fatalf("pod %s answered but its server was never seen up", p.Name)
			}
			// The timeline keeps what came before Ready (negative); the
			// metrics count it as 0.
			t := podTimeline{pod: p.Name, annotated: rw.annotatedAt[p.Name].Sub(ready),
				added: su.present[server].Sub(ready), up: su.first[server].Sub(ready), first: fa.first[p.Name].Sub(ready)}
			timelines = append(timelines, t)
			lat, member, present = append(lat, max(t.first, 0)), append(member, max(t.up, 0)), append(present, max(t.added, 0))
			annotated = append(annotated, t.annotated)
			// npl-lbsync may add the member once the Pod is annotated and
			// Ready.
			applied = append(applied, t.added-max(t.annotated, 0))
			sampled = append(sampled, t.first-t.up)
		}
		rw.mu.Unlock()
		b.StopTimer()
		scaleAndConverge(b, client, bed, ns, "web", url, 1)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(member)
	slices.Sort(present)
	slices.Sort(annotated)
	slices.Sort(applied)
	slices.Sort(sampled)
	// The slowest Pods' timelines say where the tail's time goes.
	slices.SortFunc(timelines, func(a, b podTimeline) int { return cmp.Compare(b.first, a.first) })
	for _, t := range timelines[:min(5, len(timelines))] {
		b.Logf("slow: %s", t)
	}
	b.ReportMetric(percentile(annotated, 50), "annotated-p50-ms")
	b.ReportMetric(percentile(annotated, 99), "annotated-p99-ms")
	if !gate {
		// With the gate the member is added before Ready, once the
		// containers are ready, which the watch does not time.
		b.ReportMetric(percentile(applied, 50), "lbsync-p50-ms")
		b.ReportMetric(percentile(applied, 99), "lbsync-p99-ms")
	}
	b.ReportMetric(percentile(sampled, 50), "sampling-p50-ms")
	b.ReportMetric(percentile(sampled, 99), "sampling-p99-ms")
	b.ReportMetric(percentile(present, 50), "added-p50-ms")
	b.ReportMetric(percentile(present, 99), "added-p99-ms")
	b.ReportMetric(percentile(member, 50), "member-p50-ms")
	b.ReportMetric(percentile(member, 99), "member-p99-ms")
	b.ReportMetric(float64(len(lat)), "pods")
	b.ReportMetric(percentile(lat, 50), "p50-ms")
	b.ReportMetric(percentile(lat, 99), "p99-ms")
	b.ReportMetric(float64(requests)/streamTime.Seconds(), "stream-req/s")
	b.ReportMetric(float64(failed), "failed")
}

// BenchmarkEdge_vipNodePortLocalVsNodePort measures requests through two
// VIPs on the edge to the same 4 Pods, in the same run: one whose members
// are the Pods' NodePortLocal mappings (one hop), one whose members are
// every node's NodePort of a NodePort Service (through the kube-proxy
// stand-in, a second hop when the Pod runs elsewhere). Each iteration sends
// 2000 requests to each VIP, 4 at a time, a new connection each, from the
// client namespace; it reports latency p50/p99 and requests per second of
// each, and the failed requests.
func BenchmarkEdge_vipNodePortLocalVsNodePort(b *testing.B) {
	const requests, workers = 2000, 4
	c, bed := clusterBed(b)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(b)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, "web", 4), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	np := lbService(ns, "web", "none")
	np.Spec.Type, np.Spec.LoadBalancerClass = corev1.ServiceTypeNodePort, nil
	np.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
	np, err := client.CoreV1().Services(ns).Create(ctx, np, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// The NodePortLocal members: the annotations npl-agent writes for the
	// Pods of a ClusterIP Service that opts them in (a NodePort Service
	// does not, as with Antrea).
	npl := lbService(ns, "web-npl", "none")
	npl.Spec.Type, npl.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
	npl.Spec.Selector = map[string]string{"app": "web"}
	npl.Annotations = map[string]string{contract.ServiceEnabledKey: "true"}
	if _, err := client.CoreV1().Services(ns).Create(ctx, npl, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var nplMembers []providers.Member
	waitForCond(b, 90*time.Second, "4 Pods ready and annotated", func() (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		nplMembers = nil
		for _, p := range pods.Items {
			es, err := contract.Parse(p.Annotations[contract.PodKey])
			if err != nil || len(es) != 1 {
				return false, fmt.Errorf("pod %s: annotation %q", p.Name, p.Annotations[contract.PodKey])
			}
			nplMembers = append(nplMembers, providers.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort), Enabled: true})
		}
		ready, err := readyPods(ctx, client, ns, "web")
		return len(ready) == 4 && len(nplMembers) == 4, err
	})
	var npMembers []providers.Member
	for _, n := range c.Nodes() {
		npMembers = append(npMembers, providers.Member{IP: n.IP.String(), Port: np.Spec.Ports[0].NodePort, Enabled: true})
	}
	p, err := bed.OpenProvider(ctx, "bench-vip", bed.ProviderSection())
	if err != nil {
		b.Fatal(err)
	}
	urls := map[string]string{}
	pools := map[string]string{}
	for mode, ms := range map[string][]providers.Member{"npl": nplMembers, "nodeport": npMembers} {
		name := providers.LoadBalancerName("bench-vip", ns, mode)
		pool := providers.PoolName(name, providers.TCP, 80)
		st, err := p.Ensure(ctx, &providers.LoadBalancer{Name: name, Service: ns + "/" + mode, Listeners: []providers.Listener{{
			Port: 80, Protocol: providers.TCP, Pool: providers.Pool{Name: pool, Members: providers.SortMembers(ms)}}}})
		if err != nil {
			b.Fatal(err)
		}
		if len(st.VIPs) != 1 {
			b.Fatalf("%s: VIPs %v", mode, st.VIPs)
		}
		urls[mode], pools[mode] = URL(st.VIPs[0], 80), pool
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = bed.Edges[0].WaitUp(wctx, pool, len(ms))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for mode := range urls {
			_ = p.Delete(ctx, providers.LoadBalancerName("bench-vip", ns, mode), providers.L4)
		}
	}()
	lat := map[string][]time.Duration{}
	elapsed := map[string]time.Duration{}
	failed := 0
	c0 := bed.ClientHTTP(3 * time.Second)
	b.ResetTimer()
	for range b.N {
		for _, mode := range []string{"npl", "nodeport"} {
			var mu sync.Mutex
			var wg sync.WaitGroup
			next := make(chan struct{}, requests)
			for range requests {
				next <- struct{}{}
			}
			close(next)
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range next {
						t0 := time.Now()
						_, err := Get(ctx, c0, urls[mode])
						d := time.Since(t0)
						mu.Lock()
						if err != nil {
							failed++
						} else {
							lat[mode] = append(lat[mode], d)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			elapsed[mode] += time.Since(start)
		}
	}
	b.StopTimer()
	for _, mode := range []string{"npl", "nodeport"} {
		slices.Sort(lat[mode])
		b.ReportMetric(percentile(lat[mode], 50), mode+"-p50-ms")
		b.ReportMetric(percentile(lat[mode], 99), mode+"-p99-ms")
		b.ReportMetric(float64(len(lat[mode]))/elapsed[mode].Seconds(), mode+"-req/s")
	}
	b.ReportMetric(float64(failed), "failed")
}
