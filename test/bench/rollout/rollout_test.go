// Package rollout measures, for `make bench`, how long a rolling update of a
// 100-replica Deployment behind a LoadBalancer Service takes with and
// without the npl.io/lb-registered readiness gate, on the local cluster with
// npl-agent, npl-lbsync and the Avi simulator. The gate makes the rollout
// wait for the load balancer; the figure says what that costs. Reported,
// never asserted.
package rollout

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

const replicas = 100

// BenchmarkRollout100 rolls 100 replicas (maxSurge 10, maxUnavailable 0)
// once per iteration, with and without the readiness gate.
func BenchmarkRollout100(b *testing.B) {
	c := cluster.Shared(b, cluster.Options{Nodes: 3})
	ctx := context.Background()
	agents, err := stack.StartAgents(ctx, c, stack.AgentOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stack.StopAgents(agents) })
	backend, err := stack.StartBackend("avi", b.TempDir(), netip.MustParsePrefix("198.18.140.0/28"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(backend.Close)
	l, err := stack.StartLBSync(ctx, c, stack.LBSyncOptions{Name: "npl-lbsync-bench-rollout",
		Config: "clusterName: bench\nloadBalancerClass: npl.io/bench\ndrainSeconds: 1\n" + backend.ProviderConfig()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Stop() })

	for _, gate := range []bool{true, false} {
		b.Run(fmt.Sprintf("gate=%v", gate), func(b *testing.B) {
			ns := fmt.Sprintf("rollout-%v-%d", gate, time.Now().UnixNano()%100000)
			if _, err := c.CreateNamespace(ctx, ns); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Client().AppsV1().Deployments(ns).Create(ctx, deployment(ns, gate), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			class := "npl.io/bench"
			if _, err := c.Client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"},
					Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
			}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := waitRolledOut(ctx, c, ns, 0); err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"labels":{"rev":"%d"}}}}}`, i+2)
				d, err := c.Client().AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := waitRolledOut(ctx, c, ns, d.Generation); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-rollout")
			_ = c.Client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		})
	}
}

func deployment(ns string, gate bool) *appsv1.Deployment {
	n := int32(replicas)
	surge, zero := intstr.FromInt32(10), intstr.FromInt32(0)
	grace := int64(5)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &zero}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}},
				},
			},
		},
	}
	if gate {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}
	}
	return d
}

func waitRolledOut(ctx context.Context, c *cluster.Cluster, ns string, gen int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		d, err := c.Client().AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err == nil && d.Status.ObservedGeneration >= gen && d.Status.UpdatedReplicas == replicas &&
			d.Status.Replicas == replicas && d.Status.AvailableReplicas == replicas {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rollout of %s/web: %w", ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
