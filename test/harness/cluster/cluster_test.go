package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// terminationDelay is long enough for a test to reach a terminating Pod.
const terminationDelay = 3 * time.Second

// TestCluster starts one cluster, runs every behaviour against it, then
// checks that Close leaves nothing behind.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 3, TerminationDelay: terminationDelay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	t.Logf("cluster started in %v", c.StartDuration())
	tmpDir := filepath.Dir(c.Kubeconfig())

	t.Run("deployment spreads over the nodes, serves HTTP and UDP, and scales down", func(t *testing.T) {
		testDeployment(ctx, t, c)
	})
	t.Run("readiness gate keeps a Pod not Ready until its condition is True", func(t *testing.T) {
		testReadinessGate(ctx, t, c)
	})
	t.Run("ready annotation flips container readiness", func(t *testing.T) {
		testReadyAnnotation(ctx, t, c)
	})
	t.Run("readiness delay annotation shows the Pod Running before Ready", func(t *testing.T) {
		testReadinessDelay(ctx, t, c)
	})
	t.Run("a deleted Pod keeps serving for TerminationDelay, then it and its namespace go", func(t *testing.T) {
		testTermination(ctx, t, c)
	})
	t.Run("ChangePodIP moves the Pod and its servers to a new address", func(t *testing.T) {
		testChangePodIP(ctx, t, c)
	})
	t.Run("a hostNetwork Pod gets the node IP and no namespace", func(t *testing.T) {
		testHostNetwork(ctx, t, c)
	})
	t.Run("a Pod of the echo-basic image runs the conformance backend with its env and secret volume, until deleted", func(t *testing.T) {
		testEchoBasic(ctx, t, c)
	})
	t.Run("Pods of the suite's TCP, UDP and gRPC echo modes and of the CoreDNS image serve as the suite talks to them", func(t *testing.T) {
		testSuiteBackendModes(ctx, t, c)
	})
	t.Run("InstallGatewayAPI serves the pinned standard-channel CRDs, twice in a row", func(t *testing.T) {
		testInstallGatewayAPI(ctx, t, c)
	})
	t.Run("heartbeat renews the node Lease", func(t *testing.T) {
		testHeartbeat(ctx, t, c)
	})
	t.Run("Node.Do, Node.Command and PodDo run inside their namespaces", func(t *testing.T) {
		testNodeNamespace(ctx, t, c)
	})
	t.Run("UserKubeconfig authenticates as the user and RBAC applies", func(t *testing.T) {
		testUserKubeconfig(ctx, t, c)
	})

	closeStart := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	t.Logf("closed in %v", time.Since(closeStart))
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v, want nil (Close is idempotent)", err)
	}
	if left := netnsList(t); len(left) > 0 {
		t.Errorf("after Close, network namespaces remain: %v", left)
	}
	if links := linkNames(t); !slices.Equal(links, []string{"lo"}) {
		t.Errorf("after Close, the test namespace has devices %v, want only lo", links)
	}
	if kids := childProcesses(t); len(kids) > 0 {
		t.Errorf("after Close, child processes remain: %v", kids)
	}
	if _, err := os.Stat(tmpDir); !os.IsNotExist(err) {
		t.Errorf("after Close, temporary directory %s remains (stat: %v)", tmpDir, err)
	}
}

func testDeployment(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "harness")
	sel := map[string]string{"app": "echo"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{echoContainer()},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
							TopologyKey:   corev1.LabelHostname,
						}},
					}},
				},
			},
		},
	}
	if _, err := c.Client().AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	pods, err := c.WaitForPods(ctx, ns, labels.SelectorFromSet(sel), 3, true)
	if err != nil {
		t.Fatal(err)
	}
	nodesUsed := map[string]bool{}
	netnsOf := map[string]string{}
	for _, p := range pods {
		nodesUsed[p.Spec.NodeName] = true
		node := c.Node(p.Spec.NodeName)
		if node == nil {
			t.Fatalf("pod %s is on unknown node %q", p.Name, p.Spec.NodeName)
		}
		ip := netip.MustParseAddr(p.Status.PodIP)
		if !node.PodCIDR.Contains(ip) {
			t.Errorf("pod %s has IP %s outside its node's Pod CIDR %s", p.Name, ip, node.PodCIDR)
		}
		if p.Status.HostIP != node.IP.String() {
			t.Errorf("pod %s has hostIP %s, want %s", p.Name, p.Status.HostIP, node.IP)
		}
		assertHTTP(t, ip, 8080, ns, p.Name)
		assertUDPEcho(t, ip, 5353, p.Name)
		netns, ok := c.PodNetns(ns, p.Name)
		if !ok {
			t.Fatalf("PodNetns(%s): not found", p.Name)
		}
		netnsOf[p.Name] = netns
	}
	if len(nodesUsed) != 3 {
		t.Errorf("pods run on %d distinct nodes (%v), want 3", len(nodesUsed), nodesUsed)
	}
	for _, netns := range netnsOf {
		if !slices.Contains(netnsList(t), netns) {
			t.Errorf("ip netns list lacks running pod's namespace %s", netns)
		}
	}

	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}}
	if _, err := c.Client().AppsV1().Deployments(ns).UpdateScale(ctx, "echo", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scale to 1: %v", err)
	}
	left, err := c.WaitForPods(ctx, ns, labels.SelectorFromSet(sel), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	list := netnsList(t)
	for name, netns := range netnsOf {
		want := name == left[0].Name
		if got := slices.Contains(list, netns); got != want {
			t.Errorf("after scaling to 1, namespace %s of pod %s listed: %t, want %t (ip netns list: %v)", netns, name, got, want, list)
		}
	}
	assertHTTP(t, netip.MustParseAddr(left[0].Status.PodIP), 8080, ns, left[0].Name)
}

func testReadinessGate(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "gate")
	const gate = corev1.PodConditionType("npl.io/lb-registered")
	pod := echoPod(ns, "gated")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	createPod(ctx, t, c, pod)

	got := waitPod(ctx, t, c, ns, "gated", "containers ready, Pod not Ready", func(p *corev1.Pod) bool {
		return condition(p, corev1.ContainersReady) == corev1.ConditionTrue
	})
	if s := condition(got, corev1.PodReady); s != corev1.ConditionFalse {
		t.Fatalf("with the gate's condition missing, Ready is %q, want False", s)
	}
	if r := conditionReason(got, corev1.PodReady); r != "ReadinessGatesNotReady" {
		t.Errorf("Ready reason is %q, want ReadinessGatesNotReady", r)
	}

	got.Status.Conditions = append(got.Status.Conditions, corev1.PodCondition{
		Type: gate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
	})
	if _, err := c.Client().CoreV1().Pods(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set the gate's condition: %v", err)
	}
	ready := waitPod(ctx, t, c, ns, "gated", "Ready", func(p *corev1.Pod) bool {
		return condition(p, corev1.PodReady) == corev1.ConditionTrue
	})
	if s := condition(ready, gate); s != corev1.ConditionTrue {
		t.Errorf("the gate's condition became %q, want it kept True", s)
	}
}

func testReadyAnnotation(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "flip")
	createPod(ctx, t, c, echoPod(ns, "flip"))
	waitPod(ctx, t, c, ns, "flip", "Ready", isReady)

	for _, step := range []struct {
		value     string
		wantReady bool
	}{
		{"false", false},
		{"true", true},
	} {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationReady, step.value)
		if _, err := c.Client().CoreV1().Pods(ns).Patch(ctx, "flip", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("annotate %s=%s: %v", cluster.AnnotationReady, step.value, err)
		}
		p := waitPod(ctx, t, c, ns, "flip", fmt.Sprintf("Ready=%t", step.wantReady), func(p *corev1.Pod) bool {
			return isReady(p) == step.wantReady
		})
		want := []bool{step.wantReady}
		var got []bool
		for _, cs := range p.Status.ContainerStatuses {
			got = append(got, cs.Ready)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after %s=%s, container readiness (-want +got):\n%s", cluster.AnnotationReady, step.value, diff)
		}
	}
}

func testReadinessDelay(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "delay")
	w, err := c.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "slow").String()})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	pod := echoPod(ns, "slow")
	pod.Annotations = map[string]string{cluster.AnnotationReadinessDelay: "2s"}
	createPod(ctx, t, c, pod)

	sawRunningNotReady := false
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch error: %v", ev.Object)
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && !isReady(p) {
			sawRunningNotReady = true
		}
		if isReady(p) {
			if !sawRunningNotReady {
				t.Errorf("pod became Ready without first being Running and not Ready")
			}
			return
		}
	}
	t.Fatalf("watch ended before the pod became Ready: %v", ctx.Err())
}

func testTermination(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "drain")
	createPod(ctx, t, c, echoPod(ns, "draining"))
	p := waitPod(ctx, t, c, ns, "draining", "Ready", isReady)
	netns, ok := c.PodNetns(ns, "draining")
	if !ok {
		t.Fatal("PodNetns: not found")
	}
	if err := c.Client().CoreV1().Pods(ns).Delete(ctx, "draining", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	terminating, err := c.Client().CoreV1().Pods(ns).Get(ctx, "draining", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the deleted pod during TerminationDelay (%v): %v", terminationDelay, err)
	}
	if terminating.DeletionTimestamp == nil {
		t.Fatalf("deleted pod has no deletionTimestamp")
	}
	assertHTTP(t, netip.MustParseAddr(p.Status.PodIP), 8080, ns, "draining")

	if _, err := c.WaitForPods(ctx, ns, nil, 0, false); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(netnsList(t), netns) {
		t.Errorf("namespace %s of the deleted pod is still listed", netns)
	}
}

func testChangePodIP(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "move")
	createPod(ctx, t, c, echoPod(ns, "mover"))
	before := waitPod(ctx, t, c, ns, "mover", "Ready", isReady)
	oldIP := netip.MustParseAddr(before.Status.PodIP)
	oldNetns, _ := c.PodNetns(ns, "mover")

	newIP, err := c.ChangePodIP(ctx, ns, "mover")
	if err != nil {
		t.Fatal(err)
	}
	if newIP == oldIP {
		t.Fatalf("ChangePodIP returned the old IP %s", oldIP)
	}
	if node := c.Node(before.Spec.NodeName); !node.PodCIDR.Contains(newIP) {
		t.Errorf("new IP %s is outside the node's Pod CIDR %s", newIP, node.PodCIDR)
	}
	after, err := c.Client().CoreV1().Pods(ns).Get(ctx, "mover", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantIPs := []corev1.PodIP{{IP: newIP.String()}}
	if diff := cmp.Diff(wantIPs, after.Status.PodIPs); after.Status.PodIP != newIP.String() || diff != "" {
		t.Errorf("status after ChangePodIP: podIP %s, podIPs diff (-want +got):\n%s", after.Status.PodIP, diff)
	}
	assertHTTP(t, newIP, 8080, ns, "mover")
	if slices.Contains(netnsList(t), oldNetns) {
		t.Errorf("old namespace %s still listed after ChangePodIP", oldNetns)
	}
}

func testHostNetwork(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "hostnet")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnet", Namespace: ns},
		Spec:       corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "agent", Image: "npl.io/agent"}}},
	}
	createPod(ctx, t, c, pod)
	p := waitPod(ctx, t, c, ns, "hostnet", "Ready", isReady)
	node := c.Node(p.Spec.NodeName)
	if node == nil {
		t.Fatalf("pod is on unknown node %q", p.Spec.NodeName)
	}
	got := []string{p.Status.PodIP, p.Status.HostIP}
	want := []string{node.IP.String(), node.IP.String()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("[podIP hostIP] (-want +got):\n%s", diff)
	}
	if netns, ok := c.PodNetns(ns, "hostnet"); ok {
		t.Errorf("hostNetwork pod runs in namespace %s, want none", netns)
	}
}

func testHeartbeat(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	leases := c.Client().CoordinationV1().Leases("kube-node-lease")
	renewTime := func(node string) time.Time {
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get lease of %s: %v", node, err)
		}
		if l.Spec.RenewTime == nil {
			t.Fatalf("lease of %s has no renewTime", node)
		}
		return l.Spec.RenewTime.Time
	}
	waitRenewed := func(node string, after time.Time, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for renewTime(node).Compare(after) <= 0 {
			if time.Now().After(deadline) {
				t.Fatalf("lease of %s not renewed after %v within %v", node, after, within)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	nodes := c.Nodes()
	// The periodic beat (every 10s).
	waitRenewed(nodes[0].Name, renewTime(nodes[0].Name), 30*time.Second)

	// After StopHeartbeat, StartHeartbeat renews at once.
	nodes[1].StopHeartbeat()
	stopped := renewTime(nodes[1].Name)
	nodes[1].StartHeartbeat()
	waitRenewed(nodes[1].Name, stopped, 5*time.Second)

	for _, n := range nodes {
		node, err := c.Client().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				t.Errorf("node %s Ready=%s, want True", n.Name, cond.Status)
			}
		}
		if len(node.Spec.Taints) > 0 {
			t.Errorf("node %s has taints %v, want none", n.Name, node.Spec.Taints)
		}
	}
}

func testNodeNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	ns := newNamespace(ctx, t, c, "nodens")
	nodes := c.Nodes()
	pod := echoPod(ns, "target")
	pod.Spec.NodeName = nodes[2].Name
	createPod(ctx, t, c, pod)
	p := waitPod(ctx, t, c, ns, "target", "Ready", isReady)
	podIP := netip.MustParseAddr(p.Status.PodIP)

	var addrs []string
	var body string
	err := nodes[0].Do(func() error {
		ifAddrs, err := net.InterfaceAddrs()
		if err != nil {
			return err
		}
		for _, a := range ifAddrs {
			addrs = append(addrs, a.String())
		}
		// From node 0 to a Pod on node 2: through the bridge of the test namespace.
		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(podIP, 8080).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	if err != nil {
		t.Fatalf("Do on %s: %v", nodes[0].Name, err)
	}
	if !slices.Contains(addrs, nodes[0].IP.String()+"/24") {
		t.Errorf("inside Do, addresses are %v, want the node IP %s/24 among them", addrs, nodes[0].IP)
	}
	if body != "target\n" {
		t.Errorf("from node 0, pod answered %q, want %q", body, "target\n")
	}

	// From inside the Pod to its own address.
	var podAddrs []string
	var self string
	err = c.PodDo(ns, "target", func() error {
		ifAddrs, err := net.InterfaceAddrs()
		if err != nil {
			return err
		}
		for _, a := range ifAddrs {
			podAddrs = append(podAddrs, a.String())
		}
		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(podIP, 8080).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		self = string(b)
		return err
	})
	if err != nil {
		t.Fatalf("PodDo: %v", err)
	}
	if !slices.Contains(podAddrs, podIP.String()+"/24") || self != "target\n" {
		t.Errorf("inside PodDo: addresses %v, own server answered %q; want %s/24 and %q", podAddrs, self, podIP, "target\n")
	}

	out, err := nodes[1].Command(ctx, "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("Command: %v: %s", err, out)
	}
	if !strings.Contains(string(out), nodes[1].IP.String()+"/24") {
		t.Errorf("Command ran outside node 1: eth0 shows %q, want %s", out, nodes[1].IP)
	}
}

func testUserKubeconfig(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	path, err := c.UserKubeconfig("alice", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	alice := kubernetes.NewForConfigOrDie(cfg)
	review, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	info := review.Status.UserInfo
	if info.Username != "alice" || !slices.Contains(info.Groups, "team-a") {
		t.Errorf("authenticated as %q in %v, want alice in team-a", info.Username, info.Groups)
	}
	_, err = alice.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("alice lists pods with no role binding: err %v, want Forbidden", err)
	}
}

// --- helpers ---

func echoContainer() corev1.Container {
	return corev1.Container{
		Name:  "echo",
		Image: "npl.io/echo:test",
		Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
		},
	}
}

func echoPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{echoContainer()}},
	}
}

func newNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) string {
	t.Helper()
	if _, err := c.CreateNamespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func createPod(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	if _, err := c.Client().CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
}

// waitPod polls a Pod until ok holds and returns it.
func waitPod(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last *corev1.Pod
	for {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s not %s: last status %+v (err %v)", ns, name, what, last, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func conditionReason(p *corev1.Pod, t corev1.PodConditionType) string {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Reason
		}
	}
	return ""
}

func isReady(p *corev1.Pod) bool { return condition(p, corev1.PodReady) == corev1.ConditionTrue }

func assertHTTP(t *testing.T, ip netip.Addr, port uint16, ns, name string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + netip.AddrPortFrom(ip, port).String() + "/")
	if err != nil {
		t.Errorf("HTTP to pod %s at %s:%d: %v", name, ip, port, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != name+"\n" || resp.Header.Get(cluster.PodHeader) != ns+"/"+name {
		t.Errorf("HTTP to pod %s: body %q, %s %q; want %q and %q", name, body, cluster.PodHeader, resp.Header.Get(cluster.PodHeader), name+"\n", ns+"/"+name)
	}
}

func assertUDPEcho(t *testing.T, ip netip.Addr, port uint16, name string) {
	t.Helper()
	conn, err := net.Dial("udp", netip.AddrPortFrom(ip, port).String())
	if err != nil {
		t.Errorf("UDP to pod %s: %v", name, err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Errorf("UDP to pod %s: %v", name, err)
		return
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Errorf("UDP echo from pod %s: %v", name, err)
		return
	}
	if got, want := string(buf[:n]), name+": ping"; got != want {
		t.Errorf("UDP echo from pod %s: %q, want %q", name, got, want)
	}
}

// netnsList is what `ip netns list` shows, names only.
func netnsList(t *testing.T) []string {
	t.Helper()
	out, err := runCmd(t, "ip", "netns", "list")
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// linkNames lists the network devices of the test namespace.
func linkNames(t *testing.T) []string {
	t.Helper()
	out, err := runCmd(t, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// "2: npl-n0@if2: <...": the name sits between the first two colons.
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			name, _, _ := strings.Cut(strings.TrimSpace(f[1]), "@")
			names = append(names, name)
		}
	}
	return names
}

// runCmd runs a command and returns its combined output.
func runCmd(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	out, err := osexec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// childProcesses lists the live processes whose parent is this process.
func childProcesses(t *testing.T) []string {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so cut after ')'.
		s := string(b)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(rest) > 1 && rest[1] == self {
			kids = append(kids, e.Name()+" "+s[:strings.LastIndexByte(s, ')')+1])
		}
	}
	return kids
}

func TestShared_startsOneClusterForAllCallers_noKubeletLeavesPodsToTheTest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := cluster.Options{Nodes: 1, NoKubelet: true}
	c := cluster.Shared(t, opts)
	t.Cleanup(func() {
		if err := cluster.CloseShared(); err != nil {
			t.Errorf("CloseShared: %v", err)
		}
	})
	if again := cluster.Shared(t, opts); again != c {
		t.Errorf("second Shared call returned another cluster")
	}

	ns := newNamespace(ctx, t, c, "nokubelet")
	createPod(ctx, t, c, echoPod(ns, "idle"))
	bound := waitPod(ctx, t, c, ns, "idle", "scheduled", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if bound.Status.Phase != corev1.PodPending || bound.Status.PodIP != "" {
		t.Errorf("with NoKubelet, a scheduled pod is %s with IP %q, want Pending without IP", bound.Status.Phase, bound.Status.PodIP)
	}
	if netns, ok := c.PodNetns(ns, "idle"); ok {
		t.Errorf("with NoKubelet, the pod runs in namespace %s", netns)
	}

	// The test plays the kubelet; nothing overwrites what it writes.
	bound.Status.Phase = corev1.PodRunning
	bound.Status.PodIP, bound.Status.PodIPs = "198.19.0.99", []corev1.PodIP{{IP: "198.19.0.99"}}
	if _, err := c.Client().CoreV1().Pods(ns).UpdateStatus(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write status: %v", err)
	}
	got := waitPod(ctx, t, c, ns, "idle", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if got.Status.PodIP != "198.19.0.99" {
		t.Errorf("pod IP %q after the test wrote 198.19.0.99", got.Status.PodIP)
	}
}

// BenchmarkStart measures how long Start takes for 3 nodes (until the
// apiserver is ready, the controllers are healthy, the nodes registered and
// the default ServiceAccount exists), IPv4-only and dual-stack, and reports
// the median:
//
//	go test ./test/harness/cluster -run '^$' -bench Start -benchtime 5x
func BenchmarkStart(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts cluster.Options
	}{{"IPv4", cluster.Options{}}, {"DualStack", cluster.Options{DualStack: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			var starts []time.Duration
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				c, err := cluster.Start(ctx, bc.opts)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				starts = append(starts, c.StartDuration())
				b.StopTimer()
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(starts)
			b.ReportMetric(starts[len(starts)/2].Seconds(), "s-median/start")
		})
	}
}

func testInstallGatewayAPI(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	for range 2 { // the second install updates in place
		if err := c.InstallGatewayAPI(ctx); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Client().Discovery().ServerResourcesForGroupVersion(gatewayv1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range res.APIResources {
		if !strings.Contains(r.Name, "/") {
			kinds = append(kinds, r.Kind)
		}
	}
	for _, want := range []string{"GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("%s serves %v, not %s", gatewayv1.GroupVersion, kinds, want)
		}
	}
}
