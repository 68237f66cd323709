package haproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// clusterBed starts (once per package) the local cluster with an agent on
// every node, and for the test a bed on the cluster's bridge npl-br0 with
// npl-edge running.
func clusterBed(t testing.TB) (*cluster.Cluster, *edgebed.Bed) {
	t.Helper()
	return clusterBedUDP(t, "")
}

// clusterBedUDP is clusterBed with npl-edge's --udp set to udp ("" for its
// default).
func clusterBedUDP(t testing.TB, udp string) (*cluster.Cluster, *edgebed.Bed) {
	t.Helper()
	c := cluster.Shared(t, cluster.Options{Nodes: 3, KubeProxy: true})
	if agents == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		a, err := stack.StartAgents(ctx, c, stack.AgentOptions{})
		if err != nil {
			t.Fatalf("start agents: %v", err)
		}
		agents = a
	}
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	o := edgebed.ClusterOptions(bin, "e2e")
	o.UDP = udp
	b, err := edgebed.Start(context.Background(), t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("npl-edge log:\n%s", tail(b.EdgeLog(), 40))
		}
		if err := b.Close(); err != nil {
			t.Errorf("close the bed: %v", err)
		}
	})
	if err := b.StartEdge(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, b
}

// agents run on the shared cluster's nodes until the package ends (the
// cluster's close removes their namespaces).
var agents []*stack.Agent

// startLBSync runs npl-lbsync with the haproxy provider on the bed's edge,
// for the Services of class npl.io/<name> (a class per test: Services an
// earlier test left terminating are not this one's).
func startLBSync(t testing.TB, c *cluster.Cluster, b *edgebed.Bed, name string) *stack.LBSync {
	t.Helper()
	return startLBSyncReplica(t, c, b, name, "npl-lbsync-"+name, false)
}

// extraConfig is appended to the configuration of the next npl-lbsync a
// test starts (an ingressClass, say).
var extraConfig string

// startLBSyncReplica starts one npl-lbsync replica named replica, with
// leader election when leaderElect is set.
func startLBSyncReplica(t testing.TB, c *cluster.Cluster, b *edgebed.Bed, name, replica string, leaderElect bool) *stack.LBSync {
	t.Helper()
	return startLBSyncTimed(t, c, b, name, replica, leaderElect, time.Minute, 5*time.Second)
}

// startLBSyncTimed is startLBSyncReplica with the given resyncPeriod and
// drainSeconds.
func startLBSyncTimed(t testing.TB, c *cluster.Cluster, b *edgebed.Bed, name, replica string, leaderElect bool, resync, drain time.Duration) *stack.LBSync {
	t.Helper()
	cfg := fmt.Sprintf("clusterName: %s\nloadBalancerClass: npl.io/%s\nresyncPeriod: %v\ndrainSeconds: %d\n", name, name, resync, int(drain.Seconds())) +
		b.LBSyncConfig(name) + extraConfig
	l, err := stack.StartLBSync(context.Background(), c, stack.LBSyncOptions{Name: replica, Config: cfg, LeaderElect: leaderElect})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s log tail:\n%s", l.Name, l.Tail(40))
		}
		_ = l.Stop()
	})
	return l
}

// webDeployment spreads replicas of the test web server (it answers with
// the Pod's name) over the nodes; a terminating Pod keeps serving 3s, as a
// real one does during its grace period.
func webDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	lbls := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls, Annotations: map[string]string{cluster.AnnotationTerminationDelay: "3s"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server", Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					}}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: lbls},
					}},
					TerminationGracePeriodSeconds: new(int64(5)),
				},
			},
		},
	}
}

// lbService is a LoadBalancer Service of the class npl.io/<lbsync> for the
// Deployment name.
func lbService(ns, name, lbsync string) *corev1.Service {
	class := "npl.io/" + lbsync
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// readyPods returns the names of the Deployment's ready Pods that are not
// terminating.
func readyPods(ctx context.Context, client kubernetes.Interface, ns, app string) ([]string, error) {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{"app": app}).String()})
	if err != nil {
		return nil, err
	}
	return edgebed.ReadyNames(pods.Items), nil
}

// setReady makes the stand-in kubelet report the Pod's containers ready
// or not (cluster.AnnotationReady).
func setReady(t testing.TB, client kubernetes.Interface, ns, pod string, ready bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationReady, strconv.FormatBool(ready))
	if _, err := client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("set readiness of %s: %v", pod, err)
	}
}

// answeredBy sends n requests to url and counts who answered (the Pod
// names, trimmed); the first failure ends it.
func answeredBy(ctx context.Context, b *edgebed.Bed, url string, n int) (map[string]int, error) {
	return answeredByClient(ctx, b.ClientHTTP(3*time.Second), url, n)
}

// answeredByClient is answeredBy with the client c.
func answeredByClient(ctx context.Context, c *http.Client, url string, n int) (map[string]int, error) {
	got := map[string]int{}
	for range n {
		name, err := edgebed.Get(ctx, c, url)
		if err != nil {
			return got, err
		}
		got[strings.TrimSpace(name)]++
	}
	return got, nil
}

// waitForVIP waits until Service ns/name has a load balancer address in its
// status and returns the first.
func waitForVIP(t testing.TB, client kubernetes.Interface, ns, name string, d time.Duration) string {
	t.Helper()
	var vip string
	waitForCond(t, d, "the VIP of Service "+ns+"/"+name, func() (bool, error) {
		s, err := client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return true, nil
	})
	return vip
}

func waitForCond(t testing.TB, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s (last error: %v)", d, what, last)
}

// scaleAndConverge scales the Deployment and waits until requests through
// the VIP are answered by exactly its ready Pods.
func scaleAndConverge(t testing.TB, client kubernetes.Interface, b *edgebed.Bed, ns, name, url string, replicas int32) []string {
	t.Helper()
	ctx := context.Background()
	scaleTo(t, client, ns, name, replicas)
	var pods []string
	c := b.ClientHTTP(3 * time.Second)
	waitForCond(t, 90*time.Second, fmt.Sprintf("requests through the VIP reach exactly the %d ready Pods", replicas), func() (bool, error) {
		var err error
		pods, err = readyPods(ctx, client, ns, name)
		if err != nil || len(pods) != int(replicas) {
			return false, err
		}
		got := map[string]bool{}
		for range 4 * replicas {
			name, err := edgebed.Get(ctx, c, url)
			if err != nil {
				return false, err
			}
			got[strings.TrimSpace(name)] = true
		}
		var seen []string
		for n := range got {
			seen = append(seen, n)
		}
		slices.Sort(seen)
		if !slices.Equal(seen, pods) {
			return false, fmt.Errorf("answered by %v, ready Pods %v", seen, pods)
		}
		return true, nil
	})
	return pods
}

// TestEndToEnd_requestsThroughTheVIPReachEveryReadyPod: npl-agent on every
// node, npl-lbsync with the haproxy provider, npl-edge and HAProxy on the
// edge: a LoadBalancer Service gets a VIP from the edge, requests to it
// from a client outside the nodes land on every ready Pod (one hop, through
// the NodePortLocal mappings) and, with one Pod made not Ready, on every
// ready Pod and none on the not-Ready one; scaling 3 -> 6 -> 2 under a
// continuous stream of requests fails none.
func TestEndToEnd_requestsThroughTheVIPReachEveryReadyPod(t *testing.T) {
	c, b := clusterBed(t)
	startLBSync(t, c, b, "e2e-haproxy")
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, "web", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "web", "e2e-haproxy"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := waitForVIP(t, client, ns, "web", 90*time.Second)
	if !edgebed.VIPRange.Contains(netip.MustParseAddr(vip)) {
		t.Fatalf("VIP %s is not from %s", vip, edgebed.VIPRange)
	}
	url := edgebed.URL(vip, 80)
	pods := scaleAndConverge(t, client, b, ns, "web", url, 3)

	// N requests, each counted: every ready Pod answers, nothing fails.
	const n = 90
	got := answers(t, b, url, n)
	trimmed := map[string]int{}
	for k, v := range got {
		trimmed[strings.TrimSpace(k)] += v
	}
	if !slices.Equal(names(trimmed), pods) {
		t.Fatalf("%d requests to %s answered by %v, want every ready Pod %v", n, url, trimmed, pods)
	}
	t.Logf("%d requests to VIP %s: 0 failed, per Pod %v", n, vip, trimmed)

	// One Pod not Ready (the stand-in kubelet's readiness annotation): N
	// requests reach every ready Pod and none the not-Ready one.
	notReady := pods[1]
	setReady(t, client, ns, notReady, false)
	waitForCond(t, 60*time.Second, notReady+" out of the VIP's answers", func() (bool, error) {
		ready, err := readyPods(ctx, client, ns, "web")
		if err != nil || slices.Contains(ready, notReady) {
			return false, err
		}
		got, err := answeredBy(ctx, b, url, 12)
		return err == nil && got[notReady] == 0, err
	})
	ready, err := readyPods(ctx, client, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	got = answers(t, b, url, n)
	trimmed = map[string]int{}
	for k, v := range got {
		trimmed[strings.TrimSpace(k)] += v
	}
	if trimmed[notReady] != 0 || !slices.Equal(names(trimmed), ready) {
		t.Fatalf("%d requests with %s not Ready answered by %v, want every ready Pod %v and none of %s", n, notReady, trimmed, ready, notReady)
	}
	t.Logf("%d requests with %s not Ready: 0 failed, per Pod %v, 0 to the not-Ready Pod", n, notReady, trimmed)
	setReady(t, client, ns, notReady, true)
	scaleAndConverge(t, client, b, ns, "web", url, 3)

	before := status(t, b)
	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 4, 4*time.Minute)
	scaleAndConverge(t, client, b, ns, "web", url, 6)
	scaleAndConverge(t, client, b, ns, "web", url, 2)
	time.Sleep(6 * time.Second) // the drained members' Pods go
	stopStream(t, stream)
	after := status(t, b)
	t.Logf("scale 3 -> 6 -> 2 under a stream: %d ok, %d failed; %d runtime commands, %d reloads",
		stream.OK, stream.Failed, after.RuntimeCommands-before.RuntimeCommands, after.Reloads-before.Reloads)
	if after.Reloads != before.Reloads {
		t.Errorf("scaling reloaded HAProxy %d times, want 0", after.Reloads-before.Reloads)
	}
	if stream.Failed != 0 || stream.OK == 0 {
		t.Fatalf("%d of %d requests failed during scaling, want 0; errors: %v", stream.Failed, stream.OK+stream.Failed, stream.Errors)
	}
}
