// Package ingress measures npl-lbsync serving Ingresses, for `make bench`:
// 500 Ingresses over 1000 backend Services (2 Pods each), on a local
// cluster without kubelet (the benchmark writes the Pods' status and their
// nodeportlocal.antrea.io annotations) and the mock provider. It reports
// the cold sync time and the provider writes per membership change; timings
// are reported, never asserted.
package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

const (
	ingresses   = 500
	services    = 2 * ingresses
	podsPerSvc  = 2
	namespace   = "bench-ingress"
	ingClass    = "npl-bench"
	clusterName = "benchi"
)

// parallel runs f(i) for i in [0, n) on 16 goroutines and returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

func entryJSON(nodeIP string, nodePort int) string {
	b, _ := json.Marshal([]contract.Entry{{PodPort: 8080, NodeIP: nodeIP, NodePort: nodePort, Protocol: "tcp", IPFamily: "IPv4"}})
	return string(b)
}

// populate creates the Services, Pods (Running, Ready, annotated) and Ingresses.
func populate(ctx context.Context, client kubernetes.Interface, nodes []*cluster.Node) error {
	if err := parallel(services, func(i int) error {
		_, err := client.CoreV1().Services(namespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"svc": fmt.Sprint(i)},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create services: %w", err)
	}
	if err := parallel(services*podsPerSvc, func(i int) error {
		svc, n := i/podsPerSvc, nodes[i%len(nodes)]
		name := fmt.Sprintf("pod-%d", i)
		_, err := client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"svc": fmt.Sprint(svc)},
				Annotations: map[string]string{contract.PodKey: entryJSON(n.IP.String(), 61000+i/len(nodes))}},
			Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		ip := fmt.Sprintf("198.19.%d.%d", i%len(nodes), 2+(i/len(nodes))%250)
		status := fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}],"conditions":[{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"}]}}`, ip, ip)
		_, err = client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status")
		return err
	}); err != nil {
		return fmt.Errorf("create pods: %w", err)
	}
	prefix := networkingv1.PathTypePrefix
	class := ingClass
	return parallel(ingresses, func(i int) error {
		var rules []networkingv1.IngressRule
		for j := range 2 {
			svc := fmt.Sprintf("svc-%d", 2*i+j)
			rules = append(rules, networkingv1.IngressRule{Host: svc + ".example", IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}})
		}
		_, err := client.NetworkingV1().Ingresses(namespace).Create(ctx, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ing-%d", i)},
			Spec:       networkingv1.IngressSpec{IngressClassName: &class, Rules: rules},
		}, metav1.CreateOptions{})
		return err
	})
}

// complete counts the mock's Ingress load balancers whose two pools hold
// both members.
func complete(l *stack.LBSync) (int, int64, error) {
	st, err := l.MockState()
	if err != nil {
		return 0, 0, err
	}
	n := 0
	for _, lb := range st.LoadBalancers {
		full := len(lb.Pools) == 2
		for _, p := range lb.Pools {
			full = full && len(p.Members) == podsPerSvc
		}
		if full {
			n++
		}
	}
	return n, st.Counters.Writes, nil
}

// run numbers the iterations over every call of the benchmark.
var run int

// setup creates the objects once per test binary: the benchmark function
// runs more than once (b.N = 1, then the -benchtime count).
var setup struct {
	once sync.Once
	err  error
}

func BenchmarkIngress500(b *testing.B) {
	ctx := context.Background()
	c := cluster.Shared(b, cluster.Options{Nodes: 3, NoKubelet: true})
	client := c.Client()
	setup.once.Do(func() {
		if _, err := c.CreateNamespace(ctx, namespace); err != nil {
			setup.err = err
			return
		}
		if _, err := client.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: ingClass}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName},
		}, metav1.CreateOptions{}); err != nil {
			setup.err = err
			return
		}
		start := time.Now()
		setup.err = populate(ctx, client, c.Nodes())
		b.Logf("created %d Services, %d Pods and %d Ingresses in %s", services, services*podsPerSvc, ingresses, time.Since(start).Round(time.Second))
	})
	if setup.err != nil {
		b.Fatal(setup.err)
	}

	for range b.N {
		run++
		state := filepath.Join(b.TempDir(), fmt.Sprintf("mock-%d.json", run))
		cfg := fmt.Sprintf("clusterName: %s\nloadBalancerClass: npl.io/none\ningressClass: %s\nvipPool: [\"198.18.148.0/22\"]\nprovider:\n  name: mock\n  mock:\n    stateFile: %s\n",
			clusterName, ingClass, state)
		start := time.Now()
		l, err := stack.StartLBSync(ctx, c, stack.LBSyncOptions{Name: fmt.Sprintf("npl-lbsync-ingress-bench-%d", run), Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		var writes int64
		for {
			n, w, err := complete(l)
			if err == nil && n == ingresses {
				writes = w
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("only %d of %d Ingress load balancers complete after 5 minutes", n, ingresses)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cold := time.Since(start)

		// Membership changes: move one Pod's node port at a time.
		const changes = 20
		for j := range changes {
			pod := fmt.Sprintf("pod-%d", j*7)
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, contract.PodKey, entryJSON(c.Nodes()[(j*7)%3].IP.String(), 62000-j-25*(run%30)))
			if _, err := client.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		_, after, err := complete(l)
		if err != nil {
			b.Fatal(err)
		}
		_ = l.Stop()
		b.ReportMetric(cold.Seconds(), "s-cold-sync")
		b.ReportMetric(float64(writes)/float64(ingresses), "writes/ingress-cold")
		b.ReportMetric(float64(after-writes)/changes, "writes/change")
	}
}
