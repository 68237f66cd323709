package realnodes

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/images"
)

// The steps of TestRealNodes_theChartFromHelmInstallToHelmUninstall after
// the install: what an operator does to a running installation.

// agentRollingUpdate: the same agent image under a new tag (as a release
// pipeline re-tags it) rolls out over the DaemonSet, one node at a time,
// while requests from outside the nodes go to every member all along. No
// Pod's annotation changes and no request fails: the rules stay in place
// while an agent is replaced, and the new agent keeps every port.
func (s *story) agentRollingUpdate(t *testing.T) {
	ctx := s.ctx
	members, before, err := s.appPods(ctx, "web")
	if err != nil || len(members) != 3 {
		t.Fatalf("web Pods: %v (%v)", members, err)
	}
	newTag := s.tag + "-next"
	if err := s.c.TagImage(ctx, images.Ref(images.Agent, s.tag), images.Ref(images.Agent, newTag)); err != nil {
		t.Fatal(err)
	}
	changes := s.watchAnnotations(t, before)
	oldAgents := s.agentPods(t)

	stream, vip := streamTo(members), s.vipStream(t, workloadNS, "web")
	began := time.Now()
	s.vals["agent"].(map[string]any)["image"] = map[string]any{"tag": newTag}
	helmUpgrade(t, ctx, s.c, s.vals)
	s.waitAgentsRolledOut(t, images.Ref(images.Agent, newTag))
	t.Logf("agent DaemonSet rolled out on 3 nodes in %s", time.Since(began).Round(100*time.Millisecond))
	// A few more seconds of traffic with the new agents alone.
	time.Sleep(3 * time.Second)
	res := stream.stop()
	t.Logf("request stream during the rolling update: %s", res)
	if res.failed > 0 || res.sent < 100 {
		t.Errorf("request stream: %s; want no failure among at least 100", res)
	}
	s.checkVIPStream(t, vip, "web", 100)
	for _, p := range s.agentPods(t) {
		if slices.Contains(oldAgents, p) {
			t.Errorf("agent Pod %s was not replaced", p)
		}
	}
	if ch := changes(); len(ch) > 0 {
		t.Errorf("annotations changed during the rolling update: %v", ch)
	}
	after, _, err := s.appPods(ctx, "web")
	if err != nil || !maps.Equal(after, members) {
		t.Errorf("mappings after the rolling update %v (%v); want %v", after, err, members)
	}
}

// watchAnnotations records every change of the npl annotation of the given
// Pods until the returned function is called, which returns them.
func (s *story) watchAnnotations(t *testing.T, pods []corev1.Pod) func() []string {
	t.Helper()
	want := map[string]string{}
	rv := ""
	for _, p := range pods {
		want[p.Name] = p.Annotations[contract.PodKey]
		rv = p.ResourceVersion
	}
	list, err := s.client.CoreV1().Pods(workloadNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err == nil {
		rv = list.ResourceVersion
		for _, p := range list.Items {
			if w, ok := want[p.Name]; ok && p.Annotations[contract.PodKey] != w {
				t.Fatalf("pod %s changed before the watch: %q", p.Name, p.Annotations[contract.PodKey])
			}
		}
	}
	w, err := s.client.CoreV1().Pods(workloadNS).Watch(s.ctx, metav1.ListOptions{LabelSelector: "app=web", ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var changes []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			old, known := want[p.Name]
			if !known {
				continue
			}
			if got := p.Annotations[contract.PodKey]; ev.Type == watch.Deleted || got != old {
				mu.Lock()
				changes = append(changes, fmt.Sprintf("%s %s: %q -> %q", ev.Type, p.Name, old, got))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return changes
	}
}

// agentPods lists the names of the agent DaemonSet's Pods.
func (s *story) agentPods(t *testing.T) []string {
	t.Helper()
	pods, err := s.client.CoreV1().Pods(releaseNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// waitAgentsRolledOut waits until the agent DaemonSet runs image, Ready, on
// every node that is on.
func (s *story) waitAgentsRolledOut(t *testing.T, image string) {
	t.Helper()
	nodes := 0
	for _, n := range s.c.Nodes() {
		if !s.off[n.Name] {
			nodes++
		}
	}
	waitAgentsRolledOut(t, s.ctx, s.client, nodes, image)
}

// waitAgentsRolledOut waits until the agent DaemonSet runs image, Ready, on
// the given number of nodes.
func waitAgentsRolledOut(tb testing.TB, ctx context.Context, client kubernetes.Interface, nodes int, image string) {
	tb.Helper()
	eventually(tb, ctx, "the agent DaemonSet rolled out", func(ctx context.Context) error {
		ds, err := client.AppsV1().DaemonSets(releaseNamespace).Get(ctx, releaseName+"-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != int32(nodes) || st.NumberReady != int32(nodes) || st.NumberAvailable != int32(nodes) {
			return fmt.Errorf("generation %d observed %d, %d updated, %d ready of %d", ds.Generation, st.ObservedGeneration, st.UpdatedNumberScheduled, st.NumberReady, nodes)
		}
		pods, err := client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podutils.IsPodReady(&p) && p.Spec.Containers[0].Image == image {
				ready++
			}
		}
		if ready != nodes {
			return fmt.Errorf("%d ready agent Pods run %s; want %d", ready, image, nodes)
		}
		return nil
	})
}

// kubeProxyRestart: kube-proxy restarts on every node (a kube-proxy upgrade)
// under a request stream to every member, and resyncs its rules; npl's
// chains or table and its jumps are as they were, without a repair, and no
// request fails. Then an npl jump deleted by hand is repaired, and the
// repair leaves every rule of kube-proxy's (and the kubelet's) as it was.
func (s *story) kubeProxyRestart(t *testing.T) {
	ctx := s.ctx
	members, _, err := s.appPods(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]nodeRules{}
	for _, n := range s.c.Nodes() {
		r, err := readRules(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if r.npl() == "" {
			t.Fatalf("no npl rules on %s", n.Name)
		}
		before[n.Name] = r
	}
	repairs, err := s.agentMetric(ctx, "npl_agent_drift_repairs_total")
	if err != nil {
		t.Fatal(err)
	}
	stream, vip := streamTo(members), s.vipStream(t, workloadNS, "web")
	for _, n := range s.c.Nodes() {
		began := time.Now()
		if err := s.c.RestartKubeProxy(ctx, n.Name); err != nil {
			stream.stop()
			vip.stop()
			t.Fatal(err)
		}
		t.Logf("kube-proxy of %s restarted and synced in %s", n.Name, time.Since(began).Round(100*time.Millisecond))
	}
	// Two drift checks of the agents' after the last resync.
	time.Sleep(2 * datapathCheckInterval)
	res := stream.stop()
	t.Logf("request stream during the kube-proxy restarts: %s", res)
	if res.failed > 0 || res.sent < 30 {
		t.Errorf("request stream: %s; want no failure among at least 30", res)
	}
	s.checkVIPStream(t, vip, "web", 100)
	for _, n := range s.c.Nodes() {
		r, err := readRules(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.npl(), before[n.Name].npl(); got != want {
			t.Errorf("npl's rules on %s changed across kube-proxy's restart:\n%s\nwant:\n%s", n.Name, got, want)
		}
	}
	if after, err := s.agentMetric(ctx, "npl_agent_drift_repairs_total"); err != nil || after != repairs {
		t.Errorf("drift repairs across kube-proxy's restart: %v -> %v (%v); want none: kube-proxy's resync must leave npl's rules alone", repairs, after, err)
	}

	// npl's repair of a jump deleted by hand.
	n := s.c.Nodes()[0]
	r0, err := readRules(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := deleteAJump(ctx, n, s.mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted on %s by hand: %s", n.Name, deleted)
	eventually(t, ctx, "npl's rules repaired", func(ctx context.Context) error {
		r, err := readRules(ctx, n)
		if err != nil {
			return err
		}
		if got := r.npl(); got != r0.npl() {
			return fmt.Errorf("npl's rules:\n%s\nwant:\n%s", got, r0.npl())
		}
		return nil
	})
	if after, err := s.agentMetric(ctx, "npl_agent_drift_repairs_total"); err != nil || after != repairs+1 {
		t.Errorf("drift repairs: %v -> %v (%v); want one more", repairs, after, err)
	}
	r1, err := readRules(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if r1.others() != r0.others() {
		t.Errorf("npl's repair changed rules that are not npl's on %s:\nbefore:\n%s\nafter:\n%s", n.Name, r0.others(), r1.others())
	}
	for addr, pod := range members {
		if got, err := get(ctx, addr); err != nil || got != pod {
			t.Errorf("GET %s after the repair: %s (%v); want %s", addr, got, err, pod)
		}
	}
}

// Port ranges of the port-range upgrade: the second keeps the chart's
// first node port out.
const (
	firstPortRange  = "61000-62000" // the chart's default
	secondPortRange = "61001-61999"
)

// portRangeUpgrade: a second workload, cart, takes the next node port on
// every node (web holds the first), then `helm upgrade` to a range without
// the first port rolls the agents out. cart's mappings, in both ranges,
// stay as they are and no request to them fails; web's move into the new
// range and its load balancer's pool follows; nothing is left in the old
// range: no held port, no member, and no rule once the agents'
// retiredPortGrace has passed. Requests to the members web's load balancer
// lists at each moment fail none either: a moved mapping's old port keeps
// forwarding to its Pod for that grace (make before break), while
// npl-lbsync moves the member to the new port.
func (s *story) portRangeUpgrade(t *testing.T) {
	ctx := s.ctx
	lo, hi := portRange(t, secondPortRange)
	if _, err := s.client.AppsV1().Deployments(workloadNS).Create(ctx, workloadDeployment(workloadNS, "cart", s.tag), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CoreV1().Services(workloadNS).Create(ctx, loadBalancerService(workloadNS, "cart"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cart map[string]string
	eventually(t, ctx, "cart's 3 Pods annotated and in its pool", func(ctx context.Context) error {
		m, err := s.poolIs(ctx, "cart")
		if err == nil && len(m) != 3 {
			err = fmt.Errorf("%d members", len(m))
		}
		cart = m
		return err
	})
	web, err := s.poolIs(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	moving := 0
	for addr := range web {
		if p := portOf(addr); p < lo || p > hi {
			moving++
		}
	}
	for addr := range cart {
		if p := portOf(addr); p < lo || p > hi {
			t.Fatalf("cart's member %s is outside %s: the story needs it inside", addr, secondPortRange)
		}
	}
	if moving == 0 {
		t.Fatalf("none of web's members %v is outside %s: the story needs some", web, secondPortRange)
	}
	t.Logf("web: %d of %d members outside %s; cart's %v inside", moving, len(web), secondPortRange, slices.Sorted(maps.Keys(cart)))
	// What the checks of the rules below read: each node's rules map its
	// members' node ports (in either backend's listing).
	for _, n := range s.c.Nodes() {
		r, err := readRules(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		mapped := r.nodePorts()
		for addr := range maps.All(web) {
			if host, _, _ := net.SplitHostPort(addr); host == n.IP.String() && !slices.Contains(mapped, portOf(addr)) {
				t.Fatalf("%s: the rules as read map node ports %v, not member %s's: the checks of the rules would prove nothing", n.Name, mapped, addr)
			}
		}
	}

	staying := streamTo(cart)
	listed := streamToListed(s, "web")
	vip := s.vipStream(t, workloadNS, "web")
	began := time.Now()
	s.vals["agent"].(map[string]any)["portRange"] = secondPortRange
	s.vals["agent"].(map[string]any)["retiredPortGrace"] = "10s"
	// As the README says (Members): npl-lbsync takes the entries of both
	// ranges while the agents move them; the first holds the second.
	s.vals["lbsync"].(map[string]any)["nodePortRange"] = firstPortRange
	helmUpgrade(t, ctx, s.c, s.vals)
	eventually(t, ctx, "every mapping in "+secondPortRange+" and the pools following", func(ctx context.Context) error {
		for _, app := range []string{"web", "cart"} {
			members, err := s.poolIs(ctx, app)
			if err != nil {
				return err
			}
			if len(members) != 3 {
				return fmt.Errorf("%s: %d members", app, len(members))
			}
			for addr := range members {
				if p := portOf(addr); p < lo || p > hi {
					return fmt.Errorf("%s's member %s not in %s", app, addr, secondPortRange)
				}
			}
		}
		return nil
	})
	t.Logf("mappings and pools in %s %s after the upgrade", secondPortRange, time.Since(began).Round(100*time.Millisecond))
	image, _ := s.vals["agent"].(map[string]any)["image"].(map[string]any)["tag"].(string)
	s.waitAgentsRolledOut(t, images.Ref(images.Agent, image))
	stayRes, listedRes := staying.stop(), listed.stop()
	t.Logf("request stream to cart's members, which stay: %s", stayRes)
	t.Logf("request stream to web's members as listed at each moment: %s", listedRes)
	if stayRes.failed > 0 || stayRes.sent < 100 {
		t.Errorf("request stream to the members that stay: %s; want no failure among at least 100", stayRes)
	}
	if listedRes.failed > 0 || listedRes.sent < 100 {
		t.Errorf("request stream to web's listed members: %s; want no failure among at least 100", listedRes)
	}
	s.checkVIPStream(t, vip, "web", 100)
	if after, err := s.poolIs(ctx, "cart"); err != nil || !maps.Equal(after, cart) {
		t.Errorf("cart's members after the upgrade %v (%v); want them unchanged: %v", after, err, cart)
	}
	for _, app := range []string{"web", "cart"} {
		members, err := s.poolIs(ctx, app)
		if err != nil {
			t.Fatal(err)
		}
		for addr, pod := range members {
			if got, err := get(ctx, addr); err != nil || got != pod {
				t.Errorf("GET %s: %s (%v); want %s", addr, got, err, pod)
			}
		}
	}
	for _, n := range s.c.Nodes() {
		eventually(t, ctx, n.Name+": no rule outside "+secondPortRange+" once the retired ports' grace passed", func(ctx context.Context) error {
			r, err := readRules(ctx, n)
			if err != nil {
				return err
			}
			for _, p := range r.nodePorts() {
				if p < lo || p > hi {
					return fmt.Errorf("npl still maps node port %d", p)
				}
			}
			return nil
		})
		held, err := heldPorts(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		oldLo, oldHi := portRange(t, firstPortRange)
		for _, p := range held {
			if p >= oldLo && p <= oldHi && (p < lo || p > hi) {
				t.Errorf("%s: port %d, in the old range only, still held", n.Name, p)
			}
		}
	}
}

// portOf is the port of host:port.
func portOf(addr string) int {
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return p
}

func portRange(t *testing.T, r string) (int, int) {
	t.Helper()
	a, b, _ := strings.Cut(r, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		t.Fatalf("port range %q", r)
	}
	return lo, hi
}

// secondHopRequests is how many requests the NodePort contrast sends to
// each node.
const secondHopRequests = 30

// nodePortContrast sets npl's node ports against a Kubernetes NodePort
// Service over the same Pods, served by the real kube-proxy: every node
// opens the NodePort, and most requests to a node land on a Pod of another
// node (a second hop), even with a Pod on every node, and all of them with
// one Pod on one node; an npl node port opens only on its Pod's node, and
// every request to it reaches that Pod.
func (s *story) nodePortContrast(t *testing.T) {
	ctx := s.ctx
	members, _, err := s.appPods(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	// Every workload Pod's node: another app's Pod may hold the same node
	// port number on its own node.
	all, err := s.client.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podNode := map[string]string{} // namespace/name -> node IP
	for _, p := range all.Items {
		podNode[p.Namespace+"/"+p.Name] = p.Status.HostIP
	}
	svc, err := s.client.CoreV1().Services(workloadNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web-nodeport", Namespace: workloadNS},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = s.client.CoreV1().Services(workloadNS).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	}()
	nodePort := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	nodes := s.c.Nodes()
	eventually(t, ctx, "the NodePort open on every node", func(ctx context.Context) error {
		for _, n := range nodes {
			if _, err := get(ctx, net.JoinHostPort(n.IP.String(), nodePort)); err != nil {
				return err
			}
		}
		return nil
	})
	var sent, secondHops int
	for _, n := range nodes {
		for range secondHopRequests {
			pod, err := get(ctx, net.JoinHostPort(n.IP.String(), nodePort))
			if err != nil {
				t.Fatalf("NodePort on %s: %v", n.Name, err)
			}
			sent++
			if podNode[pod] != n.IP.String() {
				secondHops++
			}
		}
	}
	t.Logf("NodePort %s: open on %d of %d nodes; %d of %d requests took a second hop to another node's Pod", nodePort, len(nodes), len(nodes), secondHops, sent)
	if secondHops == 0 {
		t.Errorf("NodePort: none of %d requests took a second hop; want kube-proxy to spread them over the 3 nodes' Pods", sent)
	}

	open, refused := 0, 0
	for addr, pod := range members {
		ip, port, _ := net.SplitHostPort(addr)
		for _, n := range nodes {
			got, err := get(ctx, net.JoinHostPort(n.IP.String(), port))
			switch {
			case n.IP.String() == ip:
				open++
				if err != nil || got != pod {
					t.Errorf("npl node port %s: %s (%v); want %s", addr, got, err, pod)
				}
			case err == nil && got == pod:
				t.Errorf("%s's npl node port %s also opens on %s", pod, port, n.Name)
			case err == nil && podNode[got] != n.IP.String():
				t.Errorf("%s:%s answered by %s on another node", n.IP, port, got)
			default:
				refused++ // or that node's own Pod, on the same number
			}
		}
	}
	t.Logf("npl node ports: %d open on their Pod's node with no second hop, %d not open on the other nodes", open, refused)
	s.onePodNodePortContrast(t)
}

// onePodNodePortContrast: with one Pod on one node, the other nodes still
// open its NodePort and every request to them takes a second hop to that
// Pod; its npl node port opens on its node alone.
func (s *story) onePodNodePortContrast(t *testing.T) {
	ctx := s.ctx
	nodes := s.c.Nodes()
	home := nodes[0]
	spec := workloadDeployment(workloadNS, "solo", s.tag).Spec.Template
	spec.Spec.NodeName = home.Name
	pod, err := s.client.CoreV1().Pods(workloadNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: workloadNS, Labels: spec.Labels}, Spec: spec.Spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A NodePort Service, and a ClusterIP one that opts solo in to
	// NodePortLocal (the agent, as Antrea's, does not count NodePort ones).
	svc, err := s.client.CoreV1().Services(workloadNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: workloadNS},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: spec.Labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	optIn, err := s.client.CoreV1().Services(workloadNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "solo-npl", Namespace: workloadNS, Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{
			Selector: spec.Labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Gone before the next step drains a node.
		bg := context.Background()
		_ = s.client.CoreV1().Services(workloadNS).Delete(bg, svc.Name, metav1.DeleteOptions{})
		_ = s.client.CoreV1().Services(workloadNS).Delete(bg, optIn.Name, metav1.DeleteOptions{})
		_ = s.client.CoreV1().Pods(workloadNS).Delete(bg, pod.Name, metav1.DeleteOptions{})
		eventually(t, s.ctx, "the Pod solo gone", func(ctx context.Context) error {
			if _, err := s.client.CoreV1().Pods(workloadNS).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
	}()
	want := workloadNS + "/solo"
	var npl string
	eventually(t, ctx, "solo ready and annotated", func(ctx context.Context) error {
		p, err := s.client.CoreV1().Pods(workloadNS).Get(ctx, "solo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		entries, err := contract.Parse(p.Annotations[contract.PodKey])
		if err != nil || len(entries) != 1 || !podutils.IsPodReady(p) {
			return fmt.Errorf("ready %v, annotation %q (%v)", podutils.IsPodReady(p), p.Annotations[contract.PodKey], err)
		}
		npl = strconv.Itoa(entries[0].NodePort)
		return nil
	})
	nodePort := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	eventually(t, ctx, "solo's NodePort open on every node", func(ctx context.Context) error {
		for _, n := range nodes {
			if _, err := get(ctx, net.JoinHostPort(n.IP.String(), nodePort)); err != nil {
				return err
			}
		}
		return nil
	})
	sent, secondHops := 0, 0
	for _, n := range nodes[1:] {
		for range secondHopRequests {
			got, err := get(ctx, net.JoinHostPort(n.IP.String(), nodePort))
			if err != nil || got != want {
				t.Fatalf("solo's NodePort on %s: %s (%v); want %s", n.Name, got, err, want)
			}
			sent++
			secondHops++ // solo is on home, not on n
		}
	}
	t.Logf("solo's NodePort %s: open on %d of %d nodes; all %d requests to the %d nodes without the Pod took a second hop to %s",
		nodePort, len(nodes), len(nodes), secondHops, len(nodes)-1, home.Name)
	if got, err := get(ctx, net.JoinHostPort(home.IP.String(), npl)); err != nil || got != want {
		t.Errorf("solo's npl node port on %s: %s (%v); want %s", home.Name, got, err, want)
	}
	for _, n := range nodes[1:] {
		if got, err := get(ctx, net.JoinHostPort(n.IP.String(), npl)); err == nil && got == want {
			t.Errorf("solo's npl node port %s also opens on %s", npl, n.Name)
		}
	}
	t.Logf("solo's npl node port %s: open on %s only", npl, home.Name)
}

// drainable are the Pods on node that kubectl drain evicts: all but the
// DaemonSets'.
func (s *story) drainable(ctx context.Context, node string) ([]corev1.Pod, error) {
	all, err := s.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all.Items, func(p corev1.Pod) bool {
		owner := metav1.GetControllerOf(&p)
		return owner != nil && owner.Kind == "DaemonSet"
	}), nil
}

// drainAndDeleteANode: a node (not npl-lbsync's) is drained — cordoned, its
// workload Pods (web's and cart's) evicted and gone, as `kubectl drain`
// does it — switched off and deleted. Its
// members leave the pools, the Pods that replace them on other nodes join,
// and the other members stay as they were.
func (s *story) drainAndDeleteANode(t *testing.T) {
	ctx := s.ctx
	members, pods, err := s.appPods(ctx, "web")
	if err != nil || len(members) != 3 {
		t.Fatalf("web Pods: %v (%v)", members, err)
	}
	lbsync, err := s.client.CoreV1().Pods(releaseNamespace).Get(ctx, s.lbsyncPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var victim corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != lbsync.Spec.NodeName {
			victim = p
			break
		}
	}
	node := victim.Spec.NodeName
	gone := ""
	for addr, pod := range members {
		if pod == workloadNS+"/"+victim.Name {
			gone = addr
		}
	}
	t.Logf("draining %s (web Pod %s, member %s, and a cart Pod)", node, victim.Name, gone)
	cart, err := s.poolIs(ctx, "cart")
	if err != nil {
		t.Fatal(err)
	}

	// kubectl drain: cordon, then evict what is not a DaemonSet's; users
	// keep sending requests to web's VIP.
	vip := s.vipStream(t, workloadNS, "web")
	defer func() {
		if vip != nil {
			vip.stop()
		}
	}()
	if _, err := s.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The steps' times, to set beside a failed request's.
	at := func(what string) { t.Logf("%s at %s", what, time.Now().Format("15:04:05.000")) }
	at("cordoned")
	evicted, err := s.drainable(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range evicted {
		if err := s.client.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}); err != nil {
			t.Fatalf("evict %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	at("evicted")
	var after map[string]string
	eventually(t, ctx, "the drained node's member replaced in the pool", func(ctx context.Context) error {
		m, err := s.poolIs(ctx, "web")
		if err != nil {
			return err
		}
		if len(m) != 3 || m[gone] != "" {
			return fmt.Errorf("members %v", m)
		}
		c, err := s.poolIs(ctx, "cart")
		if err != nil {
			return err
		}
		for addr := range c {
			if strings.HasPrefix(addr, strings.Split(gone, ":")[0]+":") || len(c) != 3 {
				return fmt.Errorf("cart's members %v", c)
			}
		}
		after = m
		return nil
	})
	at("replaced")
	// kubectl drain returns once the evicted Pods are gone (their preStop
	// and exit included); only then is the machine switched off. Stopping
	// it earlier would kill Pods that still serve.
	eventually(t, ctx, "the evicted Pods gone, as kubectl drain waits for", func(ctx context.Context) error {
		left, err := s.drainable(ctx, node)
		if err != nil {
			return err
		}
		var names []string
		for _, p := range left {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		if len(names) > 0 {
			return fmt.Errorf("still on %s: %v", node, names)
		}
		return nil
	})
	at("drained")
	// The machine goes away.
	if err := s.c.StopNode(node); err != nil {
		t.Fatal(err)
	}
	s.off[node] = true
	at("stopped")
	if err := s.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	at("deleted")
	nodeIP := strings.Split(gone, ":")[0]
	// The pool settles with the node gone: a resync of npl-lbsync's may
	// follow the Node's deletion.
	time.Sleep(3 * time.Second)
	final, err := s.poolIs(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	s.checkVIPStream(t, vip, "web", 100)
	vip = nil
	if !maps.Equal(final, after) {
		t.Errorf("members after the node's deletion %v; want %v", final, after)
	}
	for addr, pod := range members {
		if addr == gone {
			continue
		}
		if final[addr] != pod {
			t.Errorf("member %s (%s) changed: now %q", addr, pod, final[addr])
		}
	}
	cartAfter, err := s.poolIs(ctx, "cart")
	if err != nil {
		t.Fatal(err)
	}
	for addr, pod := range cart {
		if strings.HasPrefix(addr, nodeIP+":") {
			continue
		}
		if cartAfter[addr] != pod {
			t.Errorf("cart's member %s (%s) changed: now %q", addr, pod, cartAfter[addr])
		}
	}
	for addr, pod := range cartAfter {
		if strings.HasPrefix(addr, nodeIP+":") {
			t.Errorf("cart's member %s (%s) on the deleted node", addr, pod)
		}
	}
	for addr, pod := range final {
		if strings.HasPrefix(addr, nodeIP+":") {
			t.Errorf("member %s (%s) on the deleted node", addr, pod)
		}
		if got, err := get(ctx, addr); err != nil || got != pod {
			t.Errorf("GET %s: %s (%v); want %s", addr, got, err, pod)
		}
	}
}
