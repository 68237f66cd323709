package realnodes

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// BenchmarkRealNodes_podReadyToVIP is test/haproxy's
// BenchmarkEdge_podReadyToVIP on three real nodes: real kubelets, containerd
// and the CNI bridge run the workload image, whose readiness probe (every
// second) makes a Pod Ready, and a real kube-proxy runs beside npl-agent.
// npl-agent (this checkout's binary, in each node's network namespace),
// npl-lbsync with the haproxy provider and npl-edge with HAProxy on the
// cluster's bridge; a stream of 8 clients sends requests to the VIP. Per
// iteration a Deployment scales from 1 to 1+podsToVIP (100) Pods in steps of
// 10, then back to 1; it reports what edgebed.ReportReadyToVIP and
// edgebed.LoadWindow do. A real kubelet reports a Pod's IP before its
// containers start and the readiness probe passes, so npl-agent's work may
// come before Ready (annotated-* negative).
func BenchmarkRealNodes_podReadyToVIP(b *testing.B) { podReadyToVIP(b, "rn-vip", false, true) }

// BenchmarkRealNodes_podReadyToServed is the control path on its own:
// BenchmarkRealNodes_podReadyToVIP without the request stream, each Pod
// from Ready to its member up and enabled in HAProxy's runtime state, read
// from the admin socket every 10 ms (not sampled by requests), over the
// same 100 real Pods. It reports what edgebed.ReportControlPath does (p50,
// p99 and each component's share) and the machine's load; the end-to-end
// figure with the stream is BenchmarkRealNodes_podReadyToVIP's.
func BenchmarkRealNodes_podReadyToServed(b *testing.B) { podReadyToVIP(b, "rn-served", false, false) }

// BenchmarkRealNodes_podReadyToVIPWithGate is
// BenchmarkRealNodes_podReadyToVIP with the npl.io/lb-registered readiness
// gate on the Pods, as test/haproxy's BenchmarkEdge_podReadyToVIPWithGate on
// the stand-in kubelets: npl-lbsync adds a Pod's member once its containers
// are ready and sets the gate's condition once the edge has applied it, and
// the kubelet turns the Pod Ready only then, so Ready means "served by the
// VIP" (a first request before Ready counts as 0).
func BenchmarkRealNodes_podReadyToVIPWithGate(b *testing.B) { podReadyToVIP(b, "rn-gate", true, true) }

// podReadyToVIP is the body of the Pod Ready → VIP benchmarks: with the
// readiness gate or not, with the request stream (Ready → first request)
// or not (Ready → served, the control path alone).
func podReadyToVIP(b *testing.B, name string, gate, stream bool) {
	const podsToVIP, step = 100, 10
	c := startRealCluster(b, cluster.Options{Nodes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tag := imageTag(b, c)
	agents, err := stack.StartAgents(ctx, c, stack.AgentOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stack.StopAgents(agents) })
	bin, err := stack.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	bed, err := edgebed.Start(ctx, b.TempDir(), edgebed.ClusterOptions(bin, "rn"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bed.Close() })
	if err := bed.StartEdge(ctx); err != nil {
		b.Fatal(err)
	}
	cfg := fmt.Sprintf("clusterName: %s\nloadBalancerClass: npl.io/%s\nresyncPeriod: 1m\ndrainSeconds: 5\n", name, name) + bed.LBSyncConfig(name)
	lbsync, err := stack.StartLBSync(ctx, c, stack.LBSyncOptions{Name: "npl-lbsync-" + name, Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lbsync.Stop() })

	client := c.Client()
	ns := "bench-vip"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	d := workloadDeployment(ns, "web", tag)
	d.Spec.Replicas = ptr.To[int32](1)
	if gate {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	svc := loadBalancerService(ns, "web")
	svc.Spec.LoadBalancerClass = ptr.To("npl.io/" + name)
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var url string
	eventually(b, ctx, "the Service's VIP", func(ctx context.Context) error {
		s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("no VIP yet (%v)", err)
		}
		url = edgebed.URL(s.Status.LoadBalancer.Ingress[0].IP, 80)
		return nil
	})
	pool := lbmodel.PoolName(lbmodel.LoadBalancerName(name, ns, "web"), lbmodel.TCP, 80)
	rw, err := edgebed.WatchReady(ctx, client, ns, "app=web")
	if err != nil {
		b.Fatal(err)
	}
	defer rw.Stop()
	scale := func(n int) {
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
		if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// converged waits until exactly n Pods exist, all Ready and served by
	// the edge.
	converged := func(n int) {
		eventually(b, ctx, fmt.Sprintf("%d Pods ready and served", n), func(ctx context.Context) error {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil || len(pods.Items) != n || len(edgebed.ReadyNames(pods.Items)) != n {
				return fmt.Errorf("not %d ready Pods (%v)", n, err)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return bed.Edges[0].WaitUp(wctx, pool, n)
		})
	}
	converged(1)

	var timelines []edgebed.PodTimeline
	var requests, failed int
	var streamTime time.Duration
	var load edgebed.LoadWindow
	for b.Loop() {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			b.Fatal(err)
		}
		before := edgebed.ReadyNames(pods.Items)
		from, err := edgebed.SampleLoad(ctx, client, lbsync.MetricsURL())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		su := edgebed.StartServersUp(ctx, bed.Edges[0], pool)
		var fa *edgebed.FirstAnswers
		if stream {
			fa = edgebed.StartFirstAnswers(ctx, bed, url, 8, 10*time.Minute)
		}
		for n := 1 + step; n <= 1+podsToVIP; n += step {
			scale(n)
			eventually(b, ctx, fmt.Sprintf("%d Pods ready and served through the VIP", n), func(ctx context.Context) error {
				// From the watch: a List of 100 Pods every poll would be
				// work for the API server that carries the annotations.
				ready := rw.ReadyNow()
				if len(ready) != n {
					return fmt.Errorf("%d of %d Pods ready", len(ready), n)
				}
				if !stream {
					wctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					return bed.Edges[0].WaitUp(wctx, pool, n)
				}
				for _, p := range ready {
					if fa.First(p).IsZero() {
						return fmt.Errorf("%s has not answered yet", p)
					}
				}
				return nil
			})
		}
		if fa != nil {
			fa.Stop()
		}
		su.Stop()
		streamTime += time.Since(start)
		to, err := edgebed.SampleLoad(ctx, client, lbsync.MetricsURL())
		if err != nil {
			b.Fatal(err)
		}
		load.Add(from, to)
		if fa != nil {
			ok, fail := fa.Counts()
			requests, failed = requests+ok+fail, failed+fail
		}
		pods, err = client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pods.Items {
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
		scale(1)
		converged(1)
		b.StartTimer()
	}
	load.Report(b)
	if !stream {
		edgebed.ReportControlPath(b, timelines)
		return
	}
	edgebed.ReportReadyToVIP(b, timelines, gate)
	b.ReportMetric(float64(requests)/streamTime.Seconds(), "stream-req/s")
	b.ReportMetric(float64(failed), "failed")
}
