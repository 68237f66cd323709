package realnodes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodeportlocal/npl/contract"
)

// helmUninstall: `helm uninstall` runs the chart's pre-delete hooks as real
// Pods (the uninstall Job, the agent-cleanup DaemonSet on every node, the
// Job that waits for it), then deletes the release. Afterwards no node has
// an npl chain or jump of either family (iptables-save, ip6tables-save) or
// an nftables table of npl's (ip, ip6, inet), no Pod has the annotation,
// no Service, Ingress or Node carries an npl.io/ mark, finalizer or
// condition, the Services and the Ingress have no load balancer status,
// the edge holds no listener, backend or certificate of the cluster (and
// still serves another cluster's load balancer), and the workload's Pods,
// untouched, still serve.
func (s *story) helmUninstall(t *testing.T) {
	ctx := s.ctx
	_, before, err := s.appPods(ctx, "web")
	if err != nil || len(before) == 0 {
		t.Fatalf("web Pods: %d (%v)", len(before), err)
	}
	hooks := s.watchHookPods(t)
	helmUninstall(t, s.c)
	seen := hooks()

	// The hooks ran as real Pods: containers of containerd on the nodes.
	on := 0
	for _, n := range s.c.Nodes() {
		if !s.off[n.Name] {
			on++
		}
	}
	counts := map[string]int{}
	for _, p := range seen {
		counts[p.component]++
		if !strings.HasPrefix(p.containerID, "containerd://") || p.node == "" {
			t.Errorf("hook Pod %s (%s): node %q, container %q; want a container of a real node", p.name, p.component, p.node, p.containerID)
		}
		if !p.succeeded {
			t.Errorf("hook Pod %s (%s) on %s did not succeed", p.name, p.component, p.node)
		}
	}
	t.Logf("hook Pods that ran: %v", seen)
	if counts["uninstall"] < 2 || counts["agent-cleanup"] != on {
		t.Errorf("hook Pods by component %v; want the two Jobs' and agent-cleanup on each of the %d nodes", counts, on)
	}

	for _, n := range s.c.Nodes() {
		if s.off[n.Name] {
			continue
		}
		r, err := readRules(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if left := r.npl(); left != "" {
			t.Errorf("npl's rules left on %s:\n%s", n.Name, left)
		}
	}
	pods, err := s.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if _, ok := p.Annotations[contract.PodKey]; ok {
			t.Errorf("pod %s/%s keeps its annotation", p.Namespace, p.Name)
		}
		checkNoMark(t, "pod "+p.Namespace+"/"+p.Name, p.ObjectMeta)
	}
	svcs, err := s.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs.Items {
		what := "service " + svc.Namespace + "/" + svc.Name
		checkNoMark(t, what, svc.ObjectMeta)
		for _, c := range svc.Status.Conditions {
			if strings.HasPrefix(c.Type, "npl.io/") {
				t.Errorf("%s keeps the condition %s", what, c.Type)
			}
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			t.Errorf("%s keeps its load balancer status %+v", what, svc.Status.LoadBalancer.Ingress)
		}
		if svc.Name == "web" || svc.Name == "cart" {
			if _, ok := svc.Annotations[contract.ServiceEnabledKey]; ok {
				t.Errorf("%s keeps the %s annotation npl-lbsync added", what, contract.ServiceEnabledKey)
			}
		}
	}
	ings, err := s.client.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ing := range ings.Items {
		what := "ingress " + ing.Namespace + "/" + ing.Name
		checkNoMark(t, what, ing.ObjectMeta)
		if len(ing.Status.LoadBalancer.Ingress) > 0 {
			t.Errorf("%s keeps its load balancer status %+v", what, ing.Status.LoadBalancer.Ingress)
		}
	}
	s.checkEdgeHoldsNothingOfTheCluster(t, ctx)
	nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		checkNoMark(t, "node "+n.Name, n.ObjectMeta)
	}
	// Helm deletes the hooks once they succeeded; their Pods follow.
	eventually(t, ctx, "no Pod of the release left", func(ctx context.Context) error {
		left, err := s.client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(left.Items) > 0 {
			return fmt.Errorf("%d Pods left, %s first", len(left.Items), left.Items[0].Name)
		}
		return nil
	})

	// The workload, untouched, still serves on its Pods' own addresses.
	after, err := s.client.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range before {
		found := false
		for _, q := range after.Items {
			if q.UID == p.UID && podutils.IsPodReady(&q) && q.DeletionTimestamp == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("web Pod %s was replaced or is not ready after the uninstall", p.Name)
		}
		addr := p.Status.PodIP + ":8080"
		if got, err := get(ctx, addr); err != nil || got != workloadNS+"/"+p.Name {
			t.Errorf("GET %s: %s (%v); want %s/%s", addr, got, err, workloadNS, p.Name)
		}
	}
}

// checkNoMark fails the test if meta carries an npl.io/ annotation, label or
// finalizer.
func checkNoMark(t *testing.T, what string, meta metav1.ObjectMeta) {
	t.Helper()
	for k := range meta.Annotations {
		if strings.HasPrefix(k, "npl.io/") {
			t.Errorf("%s keeps the annotation %s", what, k)
		}
	}
	for k := range meta.Labels {
		if strings.HasPrefix(k, "npl.io/") {
			t.Errorf("%s keeps the label %s", what, k)
		}
	}
	for _, f := range meta.Finalizers {
		if strings.HasPrefix(f, "npl.io/") {
			t.Errorf("%s keeps the finalizer %s", what, f)
		}
	}
}

// hookPod is what the test saw of one Pod of the uninstall hooks.
type hookPod struct {
	name, component, node, containerID string
	// succeeded: a Job's Pod Succeeded, or an agent-cleanup Pod became
	// ready (its init container, the cleanup, exited 0).
	succeeded bool
}

func (p hookPod) String() string {
	return fmt.Sprintf("%s(%s on %s, succeeded %v)", p.name, p.component, p.node, p.succeeded)
}

// watchHookPods records the Pods of the uninstall hooks until the returned
// function is called, which returns them.
func (s *story) watchHookPods(t *testing.T) func() []hookPod {
	t.Helper()
	ctx, cancel := context.WithCancel(s.ctx)
	w, err := s.client.CoreV1().Pods(releaseNamespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component in (uninstall, agent-cleanup)"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]*hookPod{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			h := seen[p.Name]
			if h == nil {
				h = &hookPod{name: p.Name, component: p.Labels["app.kubernetes.io/component"]}
				seen[p.Name] = h
			}
			if p.Spec.NodeName != "" {
				h.node = p.Spec.NodeName
			}
			statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
			for _, c := range statuses {
				if c.ContainerID != "" {
					h.containerID = c.ContainerID
				}
			}
			if p.Status.Phase == corev1.PodSucceeded || (h.component == "agent-cleanup" && podutils.IsPodReady(p)) {
				h.succeeded = true
			}
			mu.Unlock()
		}
	}()
	return func() []hookPod {
		cancel()
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		var out []hookPod
		for _, h := range seen {
			out = append(out, *h)
		}
		return out
	}
}
