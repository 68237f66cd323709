// Package lbsyncbed is the bed of npl-lbsync alone: the real binary on the
// local cluster of two nodes with the mock provider, and no agent, the
// LoadBalancerPolicy CRD installed. The tests
// write the Pods' nodeportlocal.antrea.io annotations by hand (also in
// Antrea's own format) and read the exact pools, status, conditions and
// provider calls. test/lbsync (Services) and test/gateway (Gateway API) run
// on it; a package that uses it runs its tests under cluster.RunMain.
package lbsyncbed

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
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// ClusterName is the shared npl-lbsync's; the others add a suffix, as
// separate installations have separate cluster names.
const ClusterName = "it"

// Env is the shared cluster and one npl-lbsync per service type, each
// serving its own loadBalancerClass so they never compete.
type Env struct {
	Cluster *cluster.Cluster
	Client  kubernetes.Interface
	// NPL is the shared npl-lbsync: NodePortLocal mode, class npl.io/lb.
	NPL *Syncer
	// StateDir holds the mock's state files, one per class (Config).
	StateDir string
}

var shared *Env

// Setup returns the process's Env, starting the shared cluster and
// npl-lbsync on first use; it fails the test when an earlier one left
// npl-lbsync stopped, and shows its log tail when the test fails.
func Setup(t *testing.T) *Env {
	t.Helper()
	c := cluster.Shared(t, cluster.Options{Nodes: 2, TerminationDelay: 4 * time.Second})
	if shared == nil {
		e := &Env{Cluster: c, Client: c.Client(), StateDir: filepath.Join(c.LogDir(), "state")}
		if err := os.MkdirAll(e.StateDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// npl-lbsync applies LoadBalancerPolicies when their CRD is
		// served at its start, as the chart installs it by default.
		if err := c.InstallLoadBalancerPolicyCRD(context.Background()); err != nil {
			t.Fatal(err)
		}
		l, err := stack.StartLBSync(context.Background(), c, stack.LBSyncOptions{Name: "npl-lbsync", Config: e.Config(ClusterName, "NodePortLocal", "npl.io/lb", "198.18.100.0/28")})
		if err != nil {
			t.Fatal(err)
		}
		e.NPL = &Syncer{LBSync: l, ClusterName: ClusterName}
		shared = e
	}
	if !shared.NPL.Running() {
		t.Fatalf("npl-lbsync is not running (an earlier test left it stopped):\n%s", shared.NPL.Tail(30))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- npl-lbsync log tail:\n%s", shared.NPL.Tail(40))
		}
	})
	return shared
}

// Syncer is one npl-lbsync and the cluster name it was configured with.
type Syncer struct {
	*stack.LBSync
	ClusterName string
}

// Config is an npl-lbsync configuration with the mock provider.
func (e *Env) Config(cluster, serviceType, class, vipPool string) string {
	name := strings.NewReplacer("/", "-", ".", "-").Replace(class)
	return ConfigWith(cluster, serviceType, class, vipPool, fmt.Sprintf(`provider:
  name: mock
  mock:
    stateFile: %s
    allowFaultInjection: true
`, filepath.Join(e.StateDir, name+".json")))
}

// ConfigWith is an npl-lbsync configuration with a provider section.
func ConfigWith(cluster, serviceType, class, vipPool, provider string) string {
	return fmt.Sprintf(`clusterName: %s
serviceType: %s
loadBalancerClass: %s
vipPool: [%q]
resyncPeriod: 1m
drainSeconds: 1
nodePortRange: 61000-62999
`, cluster, serviceType, class, vipPool) + provider
}

// StartExtra starts another npl-lbsync for its own class, stopped at the
// end of the test; replace holds old, new pairs of its configuration.
func (e *Env) StartExtra(t *testing.T, name, serviceType, class, vipPool string, leaderElect bool, replace ...string) *Syncer {
	t.Helper()
	cluster := ClusterName + "-" + strings.TrimPrefix(class, "npl.io/")
	cfg := strings.NewReplacer(replace...).Replace(e.Config(cluster, serviceType, class, vipPool))
	return e.StartSyncer(t, name, cluster, cfg, leaderElect)
}

// StartSyncer starts an npl-lbsync of a cluster name with a configuration,
// stopped at the end of the test.
func (e *Env) StartSyncer(t *testing.T, name, cluster, cfg string, leaderElect bool) *Syncer {
	t.Helper()
	l, err := stack.StartLBSync(context.Background(), e.Cluster, stack.LBSyncOptions{
		Name: name, Config: cfg, LeaderElect: leaderElect,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s log tail:\n%s", name, l.Tail(40))
		}
		_ = l.Stop()
	})
	return &Syncer{LBSync: l, ClusterName: cluster}
}

// Context is a context that ends after d, or with the test.
func Context(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace for one test, deleted at its end.
func (e *Env) Namespace(t *testing.T) string { return e.Cluster.TestNamespace(t) }

// WaitFor polls cond until it holds and fails the test after d, with the
// last error cond returned.
func WaitFor(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
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

// WebLabels label the Pods of Pod, which LBService selects.
var WebLabels = map[string]string{"app": "web"}

// Pod is a running Pod with ports http 8080/TCP and dns 5353/UDP whose
// NodePortLocal annotation the test writes (value "" for none).
func (e *Env) Pod(t *testing.T, ns, name, node, value string, mutate ...func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: WebLabels},
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
	if _, err := e.Client.CoreV1().Pods(ns).Create(Context(t, 30*time.Second), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	WaitFor(t, 30*time.Second, "pod "+name+" running", func() (bool, error) {
		got, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, err
	})
}

// Entry is an annotation entry as npl-agent (or Antrea) writes it.
func Entry(podPort int, nodeIP string, nodePort int, proto string) string {
	return fmt.Sprintf(`{"podPort":%d,"nodeIP":%q,"nodePort":%d,"protocol":%q,"ipFamily":"IPv4"}`, podPort, nodeIP, nodePort, proto)
}

// List is the annotation value of entries.
func List(entries ...string) string { return "[" + strings.Join(entries, ",") + "]" }

// Annotate writes the Pod's NodePortLocal annotation (value "" removes it).
func (e *Env) Annotate(t *testing.T, ns, name, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.PodKey: v}}})
	if _, err := e.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate pod %s: %v", name, err)
	}
}

// Poke changes an annotation npl-lbsync does not read on a Pod ("pods") or
// a Service ("services"), which queues a sync of the Services concerned, and
// returns the object's new resourceVersion. Its event comes after every
// earlier change of the same kind on npl-lbsync's watch, so a sync that
// follows it has seen them all.
func (e *Env) Poke(t *testing.T, resource, ns, name string) string {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.npl.io/poke":%q}}}`, strconv.FormatInt(time.Now().UnixNano(), 10))
	var rv string
	var err error
	switch resource {
	case "pods":
		var p *corev1.Pod
		if p, err = e.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
			rv = p.ResourceVersion
		}
	case "services":
		var s *corev1.Service
		if s, err = e.Client.CoreV1().Services(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
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

// SyncedAfter pokes an object and waits until each syncer finished a sync
// begun after the poke (see stack.LBSync.WaitSyncs): they processed every
// earlier change, so what they did not write by now they chose not to.
func (e *Env) SyncedAfter(t *testing.T, resource, ns, name string, syncers ...*Syncer) string {
	t.Helper()
	counts := make([]float64, len(syncers))
	for i, l := range syncers {
		n, err := l.Syncs()
		if err != nil {
			t.Fatalf("read the syncs of %s: %v", l.Name, err)
		}
		counts[i] = n
	}
	rv := e.Poke(t, resource, ns, name)
	for i, l := range syncers {
		if err := l.WaitSyncs(Context(t, 20*time.Second), counts[i]); err != nil {
			t.Fatal(err)
		}
	}
	return rv
}

// SetReady sets the readiness the Pod's stand-in kubelet reports.
func (e *Env) SetReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.npl.io/ready":%q}}}`, strconv.FormatBool(ready))
	if _, err := e.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set readiness of %s: %v", name, err)
	}
}

// LBService is a LoadBalancer Service of a class (nil: none) over the Pods
// of Pod, with port http 80 by default.
func LBService(ns, name string, class *string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class, Selector: WebLabels, Ports: ports},
	}
}

// OurClass is the class of the shared npl-lbsync (Env.NPL).
var OurClass = ptr.To("npl.io/lb")

// CreateService creates the Service.
func (e *Env) CreateService(t *testing.T, s *corev1.Service) {
	t.Helper()
	if _, err := e.Client.CoreV1().Services(s.Namespace).Create(Context(t, 30*time.Second), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", s.Name, err)
	}
}

// Service reads the Service.
func (e *Env) Service(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	s, err := e.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service %s: %v", name, err)
	}
	return s
}

// UpdateService applies mutate to the current Service, retrying conflicts.
func (e *Env) UpdateService(t *testing.T, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	for {
		s := e.Service(t, ns, name)
		mutate(s)
		_, err := e.Client.CoreV1().Services(ns).Update(context.Background(), s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update service %s: %v", name, err)
		}
	}
}

// Pools returns the mock's pools of a Service's load balancer by pool name.
func Pools(l *Syncer, ns, svc string) (map[string][]lbmodel.Member, []string, bool, error) {
	st, err := l.MockState()
	if err != nil {
		return nil, nil, false, err
	}
	lb, ok := stack.FindLoadBalancer(st, lbmodel.LoadBalancerName(l.ClusterName, ns, svc))
	if !ok {
		return nil, nil, false, nil
	}
	out := map[string][]lbmodel.Member{}
	for _, li := range lb.Listeners {
		out[li.Pool.Name] = li.Pool.Members
	}
	return out, lb.VIPs, true, nil
}

// WaitPools waits until the mock holds exactly want for the Service.
func WaitPools(t *testing.T, l *Syncer, ns, svc string, want map[string][]lbmodel.Member) {
	t.Helper()
	var got map[string][]lbmodel.Member
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ok bool
		var err error
		got, _, ok, err = Pools(l, ns, svc)
		if err == nil && ok && cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools of %s/%s (-want +got):\n%s", ns, svc, cmp.Diff(want, got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PoolName is the name of the Service's pool of a port, as this syncer
// names it.
func (l *Syncer) PoolName(ns, svc string, proto lbmodel.Protocol, port int32) string {
	return lbmodel.PoolName(lbmodel.LoadBalancerName(l.ClusterName, ns, svc), proto, port)
}

// Member is a pool member.
func Member(ip string, port int32, enabled bool) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: enabled}
}

// Condition is the Service's npl.io/LoadBalancerSynced condition, nil when
// it has none.
func Condition(s *corev1.Service) *metav1.Condition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == contract.SyncedConditionType {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// NodeIP is the address of the i-th node.
func (e *Env) NodeIP(i int) string { return e.Cluster.Nodes()[i].IP.String() }

// NodeName is the name of the i-th node.
func (e *Env) NodeName(i int) string { return e.Cluster.Nodes()[i].Name }
