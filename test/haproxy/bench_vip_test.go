package haproxy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// BenchmarkEdge_podReadyToVIP measures, end to end (npl-agent on 3 nodes,
// npl-lbsync with the haproxy provider, npl-edge and HAProxy), the time from
// a Pod seen Ready (through a watch) until the first request to the VIP,
// from a stream from the client namespace, lands on it: per iteration a
// Deployment scales from 1 to 101 Pods in steps of 10, then back to 1. It
// reports p50 and p99 over the 100 Pods of every iteration, the stream's
// rate and its failed requests, and where the time goes (ReportReadyToVIP),
// each from Ready: annotated until the Pod carries npl-agent's annotation
// (the stand-in kubelet makes a Pod Ready as it gets its IP, so npl-agent's
// whole path comes after Ready here), added until HAProxy has the Pod's
// server (its runtime state polled every 10 ms), served until that server
// is up: the time to the first request without the stream's sampling
// (HAProxy's round robin gives a new server its first request at the end
// of the current round: among n members it waits up to n/rate). On a busy
// machine the watch that times Ready and the annotation may see them late,
// which shortens what is timed from them; the machine's load while the
// stream runs (LoadWindow: the host's busy CPU share, the API server's time
// for Pod status patches, npl-lbsync's time for its Ensure calls) is
// reported beside.
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
	l := startLBSync(b, c, bed, lbsync)
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
	vip := waitForVIP(b, client, ns, "web", 90*time.Second)
	url := edgebed.URL(vip, 80)
	scaleAndConverge(b, client, bed, ns, "web", url, 1)
	rw, err := edgebed.WatchReady(ctx, client, ns, "app=web")
	if err != nil {
		b.Fatal(err)
	}
	defer rw.Stop()

	var timelines []edgebed.PodTimeline
	pool := lbmodel.PoolName(lbmodel.LoadBalancerName(lbsync, ns, "web"), lbmodel.TCP, 80)
	var requests, failed int
	var streamTime time.Duration
	var load edgebed.LoadWindow
	b.ResetTimer()
	for range b.N {
		before, err := readyPods(ctx, client, ns, "web")
		if err != nil {
			b.Fatal(err)
		}
		from, err := edgebed.SampleLoad(ctx, client, l.MetricsURL())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		su := edgebed.StartServersUp(ctx, bed.Edges[0], pool)
		fa := edgebed.StartFirstAnswers(ctx, bed, url, 8, 5*time.Minute)
		for n := 1 + step; n <= 1+pods; n += step {
			patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
			if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				b.Fatal(err)
			}
			waitForCond(b, 2*time.Minute, fmt.Sprintf("%d Pods ready and answering through the VIP", n), func() (bool, error) {
				// From the watch: a List of 100 Pods every poll would be
				// work for the API server that carries the annotations.
				ready := rw.ReadyNow()
				if len(ready) != n {
					return false, nil
				}
				for _, p := range ready {
					if fa.First(p).IsZero() {
						return false, fmt.Errorf("%s has not answered yet", p)
					}
				}
				return true, nil
			})
		}
		fa.Stop()
		su.Stop()
		streamTime += time.Since(start)
		to, err := edgebed.SampleLoad(ctx, client, l.MetricsURL())
		if err != nil {
			b.Fatal(err)
		}
		load.Add(from, to)
		ok, fail := fa.Counts()
		requests, failed = requests+ok+fail, failed+fail
		after, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range after.Items {
			if slices.Contains(before, p.Name) || p.DeletionTimestamp != nil {
				continue
			}
			t, err := edgebed.Timeline(&p, rw, su, fa)
			if err != nil {
				b.Fatal(err)
			}
			timelines = append(timelines, t)
		}
		b.StopTimer()
		scaleAndConverge(b, client, bed, ns, "web", url, 1)
		b.StartTimer()
	}
	b.StopTimer()
	edgebed.ReportReadyToVIP(b, timelines, gate)
	load.Report(b)
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
	var nplMembers []lbmodel.Member
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
			nplMembers = append(nplMembers, lbmodel.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort), Enabled: true})
		}
		ready, err := readyPods(ctx, client, ns, "web")
		return len(ready) == 4 && len(nplMembers) == 4, err
	})
	var npMembers []lbmodel.Member
	for _, n := range c.Nodes() {
		npMembers = append(npMembers, lbmodel.Member{IP: n.IP.String(), Port: np.Spec.Ports[0].NodePort, Enabled: true})
	}
	p, err := bed.OpenProvider(ctx, "bench-vip", bed.ProviderSection("bench-vip"))
	if err != nil {
		b.Fatal(err)
	}
	urls := map[string]string{}
	pools := map[string]string{}
	for mode, ms := range map[string][]lbmodel.Member{"npl": nplMembers, "nodeport": npMembers} {
		name := lbmodel.LoadBalancerName("bench-vip", ns, mode)
		pool := lbmodel.PoolName(name, lbmodel.TCP, 80)
		st, err := p.Ensure(ctx, &lbmodel.LoadBalancer{Name: name, Service: ns + "/" + mode, Listeners: []lbmodel.Listener{{
			Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: pool, Members: lbmodel.SortMembers(ms)}}}})
		if err != nil {
			b.Fatal(err)
		}
		if len(st.VIPs) != 1 {
			b.Fatalf("%s: VIPs %v", mode, st.VIPs)
		}
		urls[mode], pools[mode] = edgebed.URL(st.VIPs[0], 80), pool
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = bed.Edges[0].WaitUp(wctx, pool, len(ms))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for mode := range urls {
			_ = p.Delete(ctx, lbmodel.LoadBalancerName("bench-vip", ns, mode), lbmodel.L4)
		}
	}()
	lat := map[string][]time.Duration{}
	elapsed := map[string]time.Duration{}
	failed := 0
	c0 := bed.ClientHTTP(3 * time.Second)
	b.ResetTimer()
	for range b.N {
		for _, mode := range []string{"npl", "nodeport"} {
			l, d, f := timeRequests(requests, workers, func(int) error {
				_, err := edgebed.Get(ctx, c0, urls[mode])
				return err
			})
			lat[mode], elapsed[mode], failed = append(lat[mode], l...), elapsed[mode]+d, failed+f
		}
	}
	b.StopTimer()
	for _, mode := range []string{"npl", "nodeport"} {
		slices.Sort(lat[mode])
		b.ReportMetric(edgebed.Percentile(lat[mode], 50), mode+"-p50-ms")
		b.ReportMetric(edgebed.Percentile(lat[mode], 99), mode+"-p99-ms")
		b.ReportMetric(float64(len(lat[mode]))/elapsed[mode].Seconds(), mode+"-req/s")
	}
	b.ReportMetric(float64(failed), "failed")
}

// timeRequests sends n requests with get (given the number of its worker),
// workers at a time, and returns the latencies of those that succeeded,
// the time they all took, and how many failed.
func timeRequests(n, workers int, get func(worker int) error) (lat []time.Duration, elapsed time.Duration, failed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				t0 := time.Now()
				err := get(w)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(start), failed
}
