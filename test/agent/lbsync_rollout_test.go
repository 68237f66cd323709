package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// rolloutResult is what one rolling update under load measured.
type rolloutResult struct {
	ok, failed int64
	firstErr   string
	duration   time.Duration
	// notMembers counts the new Pods that were not enabled members of the
	// pool when the Deployment reported the rollout complete.
	notMembers int
}

// rollingUpdate runs a 4-replica Deployment (maxUnavailable 0) behind a
// LoadBalancer Service on the Avi simulator, with slow pool writes, and
// rolls it while a client sends requests to the members the load balancer
// has enabled right now, as a load balancer would.
func (e *env) rollingUpdate(t *testing.T, gate bool) rolloutResult {
	t.Helper()
	class := fmt.Sprintf("npl.io/rollout-%v", gate)
	_, backend := e.startLBSync(t, fmt.Sprintf("npl-lbsync-rollout-%v", gate), "avi", netip.MustParsePrefix("198.18.121.0/28"),
		fmt.Sprintf("clusterName: e2e-rollout-%v\nloadBalancerClass: %s\ndrainSeconds: 2\n", gate, class))
	ns := e.namespace(t)
	d := deployment(ns, "web", 4)
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}}
	// A deleted Pod keeps serving 5 s, as a preStop sleep makes it, within
	// its termination grace period.
	d.Spec.Template.Annotations = map[string]string{cluster.AnnotationTerminationDelay: "5s"}
	grace := int64(30)
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = &grace
	d.Spec.Template.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = corev1.ScheduleAnyway
	if gate {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}
	}
	if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createService(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
	})
	lbName := lbmodel.LoadBalancerName(fmt.Sprintf("e2e-rollout-%v", gate), ns, "web")
	pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)
	enabled := func() []lbmodel.Member {
		pools, _, _, _ := backend.Pools(lbName)
		return slices.DeleteFunc(slices.Clone(pools[pool]), func(m lbmodel.Member) bool { return !m.Enabled })
	}
	waitFor(t, 60*time.Second, "4 enabled members", func() (bool, error) { return len(enabled()) == 4, nil })
	e.waitRolledOut(t, ns, "web", 0)

	undo := backend.(interface{ SlowPoolWrites(time.Duration) func() }).SlowPoolWrites(time.Second)
	defer undo()

	var res rolloutResult
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			members := enabled()
			if len(members) == 0 {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, "no enabled member")
			} else {
				m := members[rand.IntN(len(members))]
				if _, err := get(addr(m.IP, int(m.Port))); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					ok.Add(1)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	start := time.Now()
	dep, err := e.client.AppsV1().Deployments(ns).Patch(context.Background(), "web", types.MergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"labels":{"rev":"2"}}}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitRolledOut(t, ns, "web", dep.Generation)
	res.duration = time.Since(start)
	members := map[lbmodel.Member]bool{}
	for _, m := range enabled() {
		members[m] = true
	}
	pods, err := e.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web,rev=2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		es, err := contract.Parse(p.Annotations[contract.PodKey])
		if err != nil || len(es) != 1 || !members[lbmodel.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort), Enabled: true}] {
			res.notMembers++
		}
	}
	time.Sleep(6 * time.Second) // the old Pods' last seconds
	close(stop)
	wg.Wait()
	res.ok, res.failed = ok.Load(), failed.Load()
	if v := firstErr.Load(); v != nil {
		res.firstErr = v.(string)
	}
	return res
}

// waitRolledOut waits until the Deployment's generation gen (0: any) is
// complete: every replica updated and available, no old one left.
func (e *env) waitRolledOut(t *testing.T, ns, name string, gen int64) {
	t.Helper()
	waitFor(t, 120*time.Second, "rollout of "+name, func() (bool, error) {
		d, err := e.client.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := *d.Spec.Replicas
		return d.Status.ObservedGeneration >= gen && d.Status.UpdatedReplicas == want && d.Status.Replicas == want &&
			d.Status.AvailableReplicas == want, nil
	})
}

// TestRollout_readinessGateMakesRollingUpdatesLossless: with the
// npl.io/lb-registered readiness gate, a rolling update under a continuous
// request stream to the load balancer's current members loses no request,
// and the rollout completes only once the new Pods are members. The same
// rollout without the gate is measured and reported, not asserted.
func TestRollout_readinessGateMakesRollingUpdatesLossless(t *testing.T) {
	e := setup(t)
	var with rolloutResult
	t.Run("with the gate", func(t *testing.T) {
		with = e.rollingUpdate(t, true)
		t.Logf("with the gate: %d requests ok, %d failed (first: %q); rollout %s; new Pods not yet members at completion: %d",
			with.ok, with.failed, with.firstErr, with.duration.Round(100*time.Millisecond), with.notMembers)
		if with.failed != 0 || with.ok == 0 {
			t.Errorf("%d requests failed during the gated rollout (first: %s)", with.failed, with.firstErr)
		}
		if with.notMembers != 0 {
			t.Errorf("the rollout completed while %d new Pods were not members of the pool", with.notMembers)
		}
	})
	t.Run("without the gate (measured)", func(t *testing.T) {
		without := e.rollingUpdate(t, false)
		t.Logf("without the gate: %d requests ok, %d failed (first: %q); rollout %s; new Pods not yet members at completion: %d",
			without.ok, without.failed, without.firstErr, without.duration.Round(100*time.Millisecond), without.notMembers)
	})
}
