package agent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// lbsyncFor starts a load balancer backend and an npl-lbsync serving the
// class npl.io/<provider>, both stopped at the end of the test.
func (e *env) lbsyncFor(t *testing.T, provider string, vipSubnet netip.Prefix) (*stack.LBSync, stack.Backend, string) {
	t.Helper()
	cluster := "e2e-" + provider
	l, backend := e.startLBSync(t, "npl-lbsync-"+provider, provider, vipSubnet,
		fmt.Sprintf("clusterName: %s\nloadBalancerClass: npl.io/%s\nresyncPeriod: 1m\ndrainSeconds: 0\n", cluster, provider))
	return l, backend, cluster
}

// startLBSync starts a backend of provider and an npl-lbsync named name with
// the configuration cfg (without vipPool and provider, which it adds); both
// stop at the end of the test, and the log is shown if it failed.
func (e *env) startLBSync(t *testing.T, name, provider string, vipSubnet netip.Prefix, cfg string) (*stack.LBSync, stack.Backend) {
	t.Helper()
	backend, err := stack.StartBackend(provider, t.TempDir(), vipSubnet)
	if err != nil {
		t.Fatal(err)
	}
	stack.CloseAtEnd(t, backend)
	cfg += fmt.Sprintf("vipPool: [%q]\n%s", vipSubnet, backend.ProviderConfig())
	l, err := stack.StartLBSync(context.Background(), e.c, stack.LBSyncOptions{Name: name, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s log tail:\n%s", l.Name, l.Tail(40))
		}
		_ = l.Stop()
	})
	return l, backend
}

// deployment spreads replicas of the web server over the nodes.
func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	lbls := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server", Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					}}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: lbls},
					}},
					TerminationGracePeriodSeconds: new(int64),
				},
			},
		},
	}
}

// expectedMembers returns the ready Pods' nodeIP:nodePort for podPort 8080,
// and which Pod each member should reach.
func (e *env) expectedMembers(t *testing.T, ns string, sel map[string]string, replicas int) ([]lbmodel.Member, map[string]string) {
	t.Helper()
	var members []lbmodel.Member
	owner := map[string]string{}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d ready, annotated Pods", replicas), func() (bool, error) {
		pods, err := e.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
		if err != nil {
			return false, err
		}
		members, owner = nil, map[string]string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !podutils.IsPodReady(&p) {
				continue
			}
			es, err := contract.Parse(p.Annotations[contract.PodKey])
			if err != nil || len(es) != 1 {
				return false, nil
			}
			members = append(members, lbmodel.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort), Enabled: true})
			owner[addr(es[0].NodeIP, es[0].NodePort)] = p.Name
		}
		return len(members) == replicas && len(pods.Items) == replicas, nil
	})
	return members, owner
}

// sameMembers reports whether a and b hold the same members, each once, in
// any order: the order is the provider's business, not what the test proves.
func sameMembers(a, b []lbmodel.Member) bool {
	set := map[lbmodel.Member]int{}
	for _, m := range a {
		set[m]++
	}
	for _, m := range b {
		set[m]--
	}
	for _, n := range set {
		if n != 0 {
			return false
		}
	}
	return len(set) == len(a) // no duplicates in a (nor then in b)
}

// TestLBSync_endToEnd: for each provider, a Deployment behind a LoadBalancer
// Service gets a VIP from the load balancer, the load balancer's pool holds
// exactly the ready Pods' nodeIP:nodePort, each member answers HTTP with a
// distinct Pod, and scaling 3 -> 6 -> 2 converges. A restart of npl-lbsync
// writes nothing; an orphan of this cluster is deleted and another owner's
// object is never touched.
func TestLBSync_endToEnd(t *testing.T) {
	e := setup(t)
	for i, provider := range []string{"mock", "avi", "bigip"} {
		t.Run(provider, func(t *testing.T) {
			vipSubnet := netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/28", 110+i))
			l, backend, cluster := e.lbsyncFor(t, provider, vipSubnet)
			ns := e.namespace(t)
			if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), deployment(ns, "web", 3), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			class := "npl.io/" + provider
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"},
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
			}
			e.createService(t, svc)
			lbName := lbmodel.LoadBalancerName(cluster, ns, "web")
			pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)

			for _, replicas := range []int{3, 6, 2} {
				e.scale(t, ns, "web", int32(replicas))
				want, owner := e.expectedMembers(t, ns, map[string]string{"app": "web"}, replicas)
				start := time.Now()
				var got map[string][]lbmodel.Member
				var vips []string
				waitFor(t, 30*time.Second, fmt.Sprintf("pool with the %d ready Pods", replicas), func() (bool, error) {
					var ok bool
					var err error
					got, vips, ok, err = backend.Pools(lbName)
					if err == nil && !sameMembers(got[pool], want) {
						err = fmt.Errorf("pool %s has %v, want %v (ok %v)", pool, got[pool], want, ok)
					}
					return ok && err == nil, err
				})
				t.Logf("%s: %d replicas converged %s after the Pods were ready", provider, replicas, time.Since(start).Round(time.Millisecond))
				answered := map[string]bool{}
				for _, m := range got[pool] {
					target := addr(m.IP, int(m.Port))
					body, err := get(target)
					if err != nil || body != owner[target] {
						t.Errorf("member %s answered %q (%v), want Pod %s", target, body, err, owner[target])
					}
					answered[body] = true
				}
				if len(answered) != replicas {
					t.Errorf("members reached %d distinct Pods, want %d", len(answered), replicas)
				}
				waitFor(t, 20*time.Second, "the VIP in the Service status", func() (bool, error) {
					in := e.service(t, ns, "web").Status.LoadBalancer.Ingress
					return len(vips) == 1 && len(in) == 1 && in[0].IP == vips[0] && vipSubnet.Contains(netip.MustParseAddr(vips[0])), nil
				})
			}

			// A restart with nothing changed writes nothing. Ready means
			// the first sync is done: every Service synced once (Ensure
			// calls), then the garbage collected (a List).
			writes := backend.Writes()
			e.restartLBSync(t, l, nil)
			for _, verb := range []string{"ensure", "list"} {
				if n, err := l.Count("npl_lbsync_provider_calls_total", `verb="`+verb+`"`); err != nil || n == 0 {
					t.Errorf("ready after a restart with %v %s calls (err %v), want the first sync done", n, verb, err)
				}
			}
			if provider == "mock" {
				st, err := l.MockState()
				if err != nil || st.Counters.Writes != 0 || st.Counters.Delete != 0 || st.Counters.Ensure == 0 {
					t.Errorf("writes after a restart with no change: %+v (err %v)", st.Counters, err)
				}
			} else if got := backend.Writes(); got != writes {
				t.Errorf("a restart with no change made %d writes", got-writes)
			}

			// A Service deleted while npl-lbsync is down leaves an orphan; an
			// object of another owner sits beside it.
			ghost := svc.DeepCopy()
			ghost.ObjectMeta = metav1.ObjectMeta{Name: "ghost", Namespace: ns}
			e.createService(t, ghost)
			ghostLB := lbmodel.LoadBalancerName(cluster, ns, "ghost")
			waitFor(t, 30*time.Second, "ghost load balancer", func() (bool, error) {
				_, _, ok, err := backend.Pools(ghostLB)
				return ok, err
			})
			if err := l.Stop(); err != nil {
				t.Fatal(err)
			}
			foreign, err := backend.AddForeign()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.client.CoreV1().Services(ns).Patch(context.Background(), "ghost", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.client.CoreV1().Services(ns).Delete(context.Background(), "ghost", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := l.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := l.WaitReady(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Ready: the garbage collection of the first sync is done.
			if _, _, ok, err := backend.Pools(ghostLB); ok || err != nil {
				t.Errorf("the orphan is still there once npl-lbsync is ready (err %v)", err)
			}
			if !foreign() {
				t.Error("another owner's object was changed or deleted")
			}
			if got, _, _, _ := backend.Pools(lbName); len(got[pool]) != 2 {
				t.Errorf("the live pool changed across the restart: %v", got)
			}
		})
	}
}

// restartLBSync stops npl-lbsync, runs between (if any) and starts it again.
func (e *env) restartLBSync(t *testing.T, l *stack.LBSync, between func()) {
	t.Helper()
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *env) scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := e.client.AppsV1().Deployments(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale %s to %d: %v", name, replicas, err)
	}
}

func (e *env) service(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	s, err := e.client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service %s: %v", name, err)
	}
	return s
}
