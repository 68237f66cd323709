// Package lbsync holds npl-lbsync's integration tests: the real binary on the
// local cluster with the mock provider, and no agent: the tests write the
// Pods' nodeportlocal.antrea.io annotations by hand (also in Antrea's own
// format) and assert the exact pools, status, conditions and provider calls.
package lbsync

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// clusterName is the shared npl-lbsync's; the others add a suffix, as
// separate installations have separate cluster names.
const clusterName = "it"

// env is the shared cluster and one npl-lbsync per service type, each
// serving its own loadBalancerClass so they never compete.
type env struct {
	c        *cluster.Cluster
	client   kubernetes.Interface
	npl      *syncer // NodePortLocal mode, class npl.io/lb
	stateDir string
}

var shared *env

func setup(t *testing.T) *env {
	t.Helper()
	c := cluster.Shared(t, cluster.Options{Nodes: 2, TerminationDelay: 4 * time.Second})
	if shared == nil {
		dir := t.TempDir()
		e := &env{c: c, client: c.Client(), stateDir: filepath.Join(c.LogDir(), "state")}
		if err := os.MkdirAll(e.stateDir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = dir
		l, err := stack.StartLBSync(context.Background(), c, stack.LBSyncOptions{Name: "npl-lbsync", Config: e.config(clusterName, "NodePortLocal", "npl.io/lb", "198.18.100.0/28")})
		if err != nil {
			t.Fatal(err)
		}
		e.npl = &syncer{LBSync: l, cluster: clusterName}
		shared = e
	}
	if !shared.npl.Running() {
		t.Fatalf("npl-lbsync is not running (an earlier test left it stopped):\n%s", shared.npl.Tail(30))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- npl-lbsync log tail:\n%s", shared.npl.Tail(40))
		}
	})
	return shared
}

// syncer is one npl-lbsync and the cluster name it was configured with.
type syncer struct {
	*stack.LBSync
	cluster string
}

// config is an npl-lbsync configuration with the mock provider.
func (e *env) config(cluster, serviceType, class, vipPool string) string {
	name := strings.NewReplacer("/", "-", ".", "-").Replace(class)
	return configWith(cluster, serviceType, class, vipPool, fmt.Sprintf(`provider:
  name: mock
  mock:
    stateFile: %s
    allowFaultInjection: true
`, filepath.Join(e.stateDir, name+".json")))
}

// configWith is an npl-lbsync configuration with a provider section.
func configWith(cluster, serviceType, class, vipPool, provider string) string {
	return fmt.Sprintf(`clusterName: %s
serviceType: %s
loadBalancerClass: %s
vipPool: [%q]
resyncPeriod: 1m
drainSeconds: 1
`, cluster, serviceType, class, vipPool) + provider
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) namespace(t *testing.T) string { return e.c.TestNamespace(t) }

func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", d, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var web = map[string]string{"app": "web"}

// pod is a running Pod with ports http 8080/TCP and dns 5353/UDP whose
// NodePortLocal annotation the test writes (value "" for none).
func (e *env) pod(t *testing.T, ns, name, node, value string, mutate ...func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: web},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
			}}},
		},
	}
	if value != "" {
		p.Annotations = map[string]string{contract.PodKey: value}
	}
	for _, m := range mutate {
		m(p)
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(ctxFor(t, 30*time.Second), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	waitFor(t, 30*time.Second, "pod "+name+" running", func() (bool, error) {
		got, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, err
	})
}

// entry is an annotation entry as npl-agent (or Antrea) writes it.
func entry(podPort int, nodeIP string, nodePort int, proto string) string {
	return fmt.Sprintf(`{"podPort":%d,"nodeIP":%q,"nodePort":%d,"protocol":%q,"ipFamily":"IPv4"}`, podPort, nodeIP, nodePort, proto)
}

func list(entries ...string) string { return "[" + strings.Join(entries, ",") + "]" }

func (e *env) annotate(t *testing.T, ns, name, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.PodKey: v}}})
	if _, err := e.client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate pod %s: %v", name, err)
	}
}

// poke changes an annotation npl-lbsync does not read on a Pod ("pods") or
// a Service ("services"), which queues a sync of the Services concerned, and
// returns the object's new resourceVersion. Its event comes after every
// earlier change of the same kind on npl-lbsync's watch, so a sync that
// follows it has seen them all.
func (e *env) poke(t *testing.T, resource, ns, name string) string {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.npl.io/poke":%q}}}`, strconv.FormatInt(time.Now().UnixNano(), 10))
	var rv string
	var err error
	switch resource {
	case "pods":
		var p *corev1.Pod
		if p, err = e.client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
			rv = p.ResourceVersion
		}
	case "services":
		var s *corev1.Service
		if s, err = e.client.CoreV1().Services(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
			rv = s.ResourceVersion
		}
	default:
		t.Fatalf("poke: unknown resource %q", resource)
	}
	if err != nil {
		t.Fatalf("poke %s %s/%s: %v", resource, ns, name, err)
	}
	return rv
}

// syncedAfter pokes an object and waits until each syncer finished a sync
// begun after the poke (see stack.LBSync.WaitSyncs): they processed every
// earlier change, so what they did not write by now they chose not to.
func (e *env) syncedAfter(t *testing.T, resource, ns, name string, syncers ...*syncer) string {
	t.Helper()
	counts := make([]float64, len(syncers))
	for i, l := range syncers {
		n, err := l.Syncs()
		if err != nil {
			t.Fatalf("read the syncs of %s: %v", l.Name, err)
		}
		counts[i] = n
	}
	rv := e.poke(t, resource, ns, name)
	for i, l := range syncers {
		if err := l.WaitSyncs(ctxFor(t, 20*time.Second), counts[i]); err != nil {
			t.Fatal(err)
		}
	}
	return rv
}

func (e *env) setReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.npl.io/ready":%q}}}`, strconv.FormatBool(ready))
	if _, err := e.client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set readiness of %s: %v", name, err)
	}
}

// lbService is a LoadBalancer Service of a class (nil: none).
func lbService(ns, name string, class *string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class, Selector: web, Ports: ports},
	}
}

func ptr[T any](v T) *T { return &v }

var ourClass = ptr("npl.io/lb")

func (e *env) createService(t *testing.T, s *corev1.Service) {
	t.Helper()
	if _, err := e.client.CoreV1().Services(s.Namespace).Create(ctxFor(t, 30*time.Second), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", s.Name, err)
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

func (e *env) updateService(t *testing.T, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	for {
		s := e.service(t, ns, name)
		mutate(s)
		_, err := e.client.CoreV1().Services(ns).Update(context.Background(), s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update service %s: %v", name, err)
		}
	}
}

// pools returns the mock's pools of a Service's load balancer by pool name.
func pools(l *syncer, ns, svc string) (map[string][]lbmodel.Member, []string, bool, error) {
	st, err := l.MockState()
	if err != nil {
		return nil, nil, false, err
	}
	lb, ok := stack.FindLoadBalancer(st, lbmodel.LoadBalancerName(l.cluster, ns, svc))
	if !ok {
		return nil, nil, false, nil
	}
	out := map[string][]lbmodel.Member{}
	for _, li := range lb.Listeners {
		out[li.Pool.Name] = li.Pool.Members
	}
	return out, lb.VIPs, true, nil
}

// waitPools waits until the mock holds exactly want for the Service.
func waitPools(t *testing.T, l *syncer, ns, svc string, want map[string][]lbmodel.Member) {
	t.Helper()
	var got map[string][]lbmodel.Member
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ok bool
		var err error
		got, _, ok, err = pools(l, ns, svc)
		if err == nil && ok && cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools of %s/%s (-want +got):\n%s", ns, svc, cmp.Diff(want, got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *syncer) poolName(ns, svc string, proto lbmodel.Protocol, port int32) string {
	return lbmodel.PoolName(lbmodel.LoadBalancerName(l.cluster, ns, svc), proto, port)
}

func member(ip string, port int32, enabled bool) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: enabled}
}

func condition(s *corev1.Service) *metav1.Condition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == contract.SyncedConditionType {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// nodeIP of the i-th node.
func (e *env) nodeIP(i int) string   { return e.c.Nodes()[i].IP.String() }
func (e *env) nodeName(i int) string { return e.c.Nodes()[i].Name }
