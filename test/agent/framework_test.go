package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// env is the shared cluster of this test binary with an agent on every node.
type env struct {
	c      *cluster.Cluster
	client kubernetes.Interface
	agents []*stack.Agent
	// dp reads the backend the agents run (set by forEachDatapath).
	dp nodeDatapath
}

var shared *env

// setup returns the package's cluster and agents, starting them on first use.
func setup(t *testing.T) *env {
	t.Helper()
	c := cluster.Shared(t, cluster.Options{Nodes: 3})
	if shared == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		agents, err := stack.StartAgents(ctx, c, stack.AgentOptions{Datapath: datapaths[0].backend()})
		if err != nil {
			t.Fatalf("start agents: %v", err)
		}
		shared = &env{c: c, client: c.Client(), agents: agents, dp: datapaths[0]}
	}
	for _, a := range shared.agents {
		if !a.Running() {
			t.Fatalf("%s is not running (an earlier test left it stopped):\n%s", a.Name, a.Tail(20))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range shared.agents {
				t.Logf("--- %s log tail:\n%s", a.Name, a.Tail(25))
			}
		}
	})
	return shared
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// namespace creates a namespace for one test, deleted at its end.
func (e *env) namespace(t *testing.T) string { return e.c.TestNamespace(t) }

// webPod is a Pod with an HTTP port 8080 ("http") and a UDP echo port 5353
// ("dns"), bound to a node.
func webPod(ns, name, node string, labels map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
			}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func (e *env) createPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := e.client.CoreV1().Pods(p.Namespace).Create(ctxFor(t, 30*time.Second), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	return out
}

// npService is an opted-in ClusterIP Service.
func npService(ns, name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: ports},
	}
}

func (e *env) createService(t *testing.T, s *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := e.client.CoreV1().Services(s.Namespace).Create(ctxFor(t, 30*time.Second), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", s.Name, err)
	}
	return out
}

// updateService applies mutate to the current Service, retrying conflicts.
func (e *env) updateService(t *testing.T, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for {
		s, err := e.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get service %s: %v", name, err)
		}
		mutate(s)
		_, err = e.client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update service %s: %v", name, err)
		}
	}
}

// updatePod applies mutate to the current Pod, retrying conflicts.
func (e *env) updatePod(t *testing.T, ns, name string, mutate func(*corev1.Pod)) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", name, err)
		}
		mutate(p)
		_, err = e.client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update pod %s: %v", name, err)
		}
	}
}

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

// entries returns the Pod's parsed annotation; nil when it has none.
func (e *env) entries(t *testing.T, ns, name string) ([]contract.Entry, bool, error) {
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	v, ok := p.Annotations[contract.PodKey]
	if !ok {
		return nil, false, nil
	}
	es, err := contract.Parse(v)
	return es, true, err
}

// waitEntries waits until the Pod's annotation holds n entries and returns them.
func (e *env) waitEntries(t *testing.T, ns, name string, n int) []contract.Entry {
	t.Helper()
	var got []contract.Entry
	waitFor(t, 30*time.Second, fmt.Sprintf("%d annotation entries on pod %s/%s", n, ns, name), func() (bool, error) {
		es, ok, err := e.entries(t, ns, name)
		got = es
		return ok && err == nil && len(es) == n, err
	})
	return got
}

// waitNoAnnotation waits until the Pod has no annotation.
func (e *env) waitNoAnnotation(t *testing.T, ns, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, "annotation removed from "+ns+"/"+name, func() (bool, error) {
		_, ok, err := e.entries(t, ns, name)
		return err == nil && !ok, err
	})
}

func (e *env) node(name string) *cluster.Node { return e.c.Node(name) }

func (e *env) agent(node string) *stack.Agent {
	for _, a := range e.agents {
		if a.Node.Name == node {
			return a
		}
	}
	return nil
}

// natRules returns the node's nat table as iptables-save prints it.
func natRules(t *testing.T, n *cluster.Node) string {
	t.Helper()
	out, err := n.Command(context.Background(), "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save on %s: %v: %s", n.Name, err, out)
	}
	return string(out)
}

// portHeld reports whether an IPv4 socket on the node holds the port.
func portHeld(t *testing.T, n *cluster.Node, proto contract.Protocol, port int) bool {
	t.Helper()
	return portHeldOf(t, n, contract.FamilyIPv4, proto, port)
}

// portHeldOf reports whether a socket of the family holds the port on the
// node: a bind on the family's wildcard address fails with EADDRINUSE.
func portHeldOf(t *testing.T, n *cluster.Node, f contract.Family, proto contract.Protocol, port int) bool {
	t.Helper()
	suffix, wildcard := "4", "0.0.0.0"
	if f == contract.FamilyIPv6 {
		suffix, wildcard = "6", "::"
	}
	held := false
	err := n.Do(func() error {
		a := addr(wildcard, port)
		if proto == contract.ProtocolUDP {
			c, err := net.ListenPacket("udp"+suffix, a)
			if err != nil {
				held = true
				return nil
			}
			return c.Close()
		}
		l, err := net.Listen("tcp"+suffix, a)
		if err != nil {
			held = true
			return nil
		}
		return l.Close()
	})
	if err != nil {
		t.Fatalf("bind on %s: %v", n.Name, err)
	}
	return held
}

// get sends one HTTP request to addr from the test namespace.
func get(addr string) (string, error) { return stack.HTTPGet(addr) }

// getFrom sends one HTTP request to addr from inside the node's namespace.
func getFrom(n *cluster.Node, addr string) (string, error) {
	var body string
	err := n.Do(func() error {
		var err error
		body, err = stack.HTTPGet(addr)
		return err
	})
	return body, err
}

// getFromPod sends one HTTP request to addr from inside a Pod's namespace.
func (e *env) getFromPod(ns, pod, addr string) (string, error) {
	var body string
	err := e.c.PodDo(ns, pod, func() error {
		var err error
		body, err = stack.HTTPGet(addr)
		return err
	})
	return body, err
}

// eventually retries f for up to d until it returns nil.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	waitFor(t, d, what, func() (bool, error) {
		err := f()
		return err == nil, err
	})
}

func addr(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// runIn runs a command in a node's namespace and fails the test on error.
func runIn(t *testing.T, n *cluster.Node, name string, args ...string) string {
	t.Helper()
	out, err := n.Command(context.Background(), name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v on %s: %v: %s", name, args, n.Name, err, out)
	}
	return string(out)
}
