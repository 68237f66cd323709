package realnodes

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/images"
)

// BenchmarkRealNodes_threeNodesReady measures a cold start of the cluster
// with three real nodes: control plane, containerd, kubelets and
// kube-proxies up, the images imported into every node, every node Ready.
func BenchmarkRealNodes_threeNodesReady(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		began := time.Now()
		c, err := cluster.Start(ctx, cluster.Options{Nodes: 3, RealNodes: true})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(began)
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-ready/op")
}

// podsPerRound is how many Pods BenchmarkRealNodes_podStartToAnnotation
// creates at once.
const podsPerRound = 100

// BenchmarkRealNodes_podStartToAnnotation measures, on three real nodes with
// the chart installed, how long after its creation a real Pod (a container
// with one TCP port, started by containerd on the CNI bridge) carries the
// agent's annotation: podsPerRound Pods created at once per round, p50 and
// p99 over all of them.
func BenchmarkRealNodes_podStartToAnnotation(b *testing.B) {
	c := startRealCluster(b, cluster.Options{Nodes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tag := imageTag(b, c)
	helmInstall(b, ctx, c, map[string]any{
		"clusterName": "bench", "vipPool": []any{vipRange}, "provider": map[string]any{"name": "mock"},
		"lbsync": map[string]any{"replicas": 1, "image": map[string]any{"tag": tag}},
		"agent":  map[string]any{"image": map[string]any{"tag": tag}},
	})
	client := c.Client()
	eventually(b, ctx, "the agent DaemonSet Ready", func(ctx context.Context) error {
		dss, err := client.AppsV1().DaemonSets(releaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(dss.Items) != 1 || dss.Items[0].Status.NumberReady != 3 {
			return fmt.Errorf("not ready: %v", err)
		}
		return nil
	})
	ns := "bench"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// The agent maps the Pods that a Service opted in to NodePortLocal selects.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns, Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "bench"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var latencies []time.Duration
	round := 0
	for b.Loop() {
		round++
		latencies = append(latencies, podRound(b, ctx, client, ns, round, images.Ref(images.Workload, tag))...)
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 { return latencies[int(p*float64(len(latencies)-1))].Seconds() * 1000 }
	b.ReportMetric(pct(0.5), "ms-create-to-annotation-p50")
	b.ReportMetric(pct(0.99), "ms-create-to-annotation-p99")
}

// podRound creates podsPerRound Pods, returns each one's time from Create to
// its first annotation, then deletes them and waits until they are gone.
func podRound(b *testing.B, ctx context.Context, client kubernetes.Interface, ns string, round int, image string) []time.Duration {
	b.Helper()
	label := fmt.Sprintf("round-%d", round)
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "round=" + label})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created := map[string]time.Time{}
	annotated := map[string]time.Duration{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || pod.Annotations[contract.PodKey] == "" {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, seen := annotated[pod.Name]; !seen {
				if t0, ok := created[pod.Name]; ok {
					annotated[pod.Name] = now.Sub(t0)
				}
			}
			n := len(annotated)
			mu.Unlock()
			if n == podsPerRound {
				return
			}
		}
	}()
	for i := range podsPerRound {
		name := fmt.Sprintf("%s-%d", label, i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"round": label, "app": "bench"}},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{
					Name: "web", Image: image, ImagePullPolicy: corev1.PullNever,
					Env:   []corev1.EnvVar{{Name: "TCP_PORTS", Value: "8080"}},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				}},
			},
		}
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		n := len(annotated)
		mu.Unlock()
		b.Fatalf("round %d: %d of %d Pods annotated", round, n, podsPerRound)
	}
	b.StopTimer()
	defer b.StartTimer()
	if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "round=" + label}); err != nil {
		b.Fatal(err)
	}
	eventually(b, ctx, "the round's Pods gone", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "round=" + label})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("%d left (%v)", len(pods.Items), err)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	out := make([]time.Duration, 0, len(annotated))
	for _, d := range annotated {
		out = append(out, d)
	}
	return out
}

// BenchmarkRealNodes_agentDaemonSetRollout measures, on three real nodes
// with the chart installed and a 3-replica workload mapped, a rolling
// update of the agent DaemonSet: from `helm upgrade` to a new image tag
// (the same image, tagged anew in every node's containerd) until the agent
// runs the new tag, Ready, on every node (the chart's maxUnavailable 1: one
// node after another).
func BenchmarkRealNodes_agentDaemonSetRollout(b *testing.B) {
	c := startRealCluster(b, cluster.Options{Nodes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tag := imageTag(b, c)
	vals := map[string]any{
		"clusterName": "bench", "vipPool": []any{vipRange}, "provider": map[string]any{"name": "mock"},
		"lbsync": map[string]any{"replicas": 1, "image": map[string]any{"tag": tag}},
		"agent":  map[string]any{"image": map[string]any{"tag": tag}},
	}
	helmInstall(b, ctx, c, vals)
	client := c.Client()
	waitAgentsRolledOut(b, ctx, client, 3, images.Ref(images.Agent, tag))
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.AppsV1().Deployments(workloadNS).Create(ctx, workloadDeployment(workloadNS, "web", tag), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.CoreV1().Services(workloadNS).Create(ctx, loadBalancerService(workloadNS, "web"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	eventually(b, ctx, "web's 3 Pods ready and annotated", func(ctx context.Context) error {
		members, _, err := (&story{client: client}).appPods(ctx, "web")
		if err == nil && len(members) != 3 {
			err = fmt.Errorf("%d mapped", len(members))
		}
		return err
	})
	var total time.Duration
	round := 0
	for b.Loop() {
		round++
		b.StopTimer()
		next := fmt.Sprintf("%s-rollout-%d", tag, round)
		if err := c.TagImage(ctx, images.Ref(images.Agent, tag), images.Ref(images.Agent, next)); err != nil {
			b.Fatal(err)
		}
		vals["agent"] = map[string]any{"image": map[string]any{"tag": next}}
		b.StartTimer()
		began := time.Now()
		helmUpgrade(b, ctx, c, vals)
		waitAgentsRolledOut(b, ctx, client, 3, images.Ref(images.Agent, next))
		total += time.Since(began)
	}
	b.ReportMetric(total.Seconds()/float64(round), "s-rollout/op")
}
