package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/stack"
)

// restartAgent stops the node's agent, runs between (if any), then starts it
// with the given port range and waits until it is ready.
func (e *env) restartAgent(t *testing.T, node, portRange string, between func()) {
	t.Helper()
	a := e.agent(node)
	if err := a.Stop(); err != nil {
		t.Fatalf("stop %s: %v", a.Name, err)
	}
	if between != nil {
		between()
	}
	a.SetPortRange(portRange)
	if err := a.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", a.Name, err)
	}
	if err := a.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAgent_restartKeepsPortsAndTraffic: while the agent is down and while it
// restores, every mapping keeps working; afterwards no node port changed.
func TestAgent_restartKeepsPortsAndTraffic(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	const pods = 5
	for i := range pods {
		e.createPod(t, webPod(ns, fmt.Sprintf("web-%d", i), node1, web))
	}
	e.createService(t, npService(ns, "web", web))
	before := map[string]contract.Entry{}
	for i := range pods {
		name := fmt.Sprintf("web-%d", i)
		x := e.waitEntries(t, ns, name, 1)[0]
		before[name] = x
		eventually(t, 10*time.Second, "traffic to "+name, func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))(name) })
	}

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("web-%d", i%pods)
			x := before[name]
			if err := expectBody(get(addr(x.NodeIP, x.NodePort)))(name); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				ok.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	e.restartAgent(t, node1, "61000-62000", func() { time.Sleep(2 * time.Second) })
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Errorf("requests during the restart: %d ok, %d failed (first: %v)", ok.Load(), failed.Load(), firstErr.Load())
	}
	t.Logf("requests during the restart: %d ok, %d failed", ok.Load(), failed.Load())
	for name, x := range before {
		got := e.waitEntries(t, ns, name, 1)[0]
		if got != x {
			t.Errorf("%s: entry changed across the restart: %+v -> %+v", name, x, got)
		}
		if !portHeld(t, e.node(node1), "tcp", x.NodePort) {
			t.Errorf("%s: node port %d not reserved again after the restart", name, x.NodePort)
		}
	}
}

// TestAgent_portRangeChange: after a restart with another range, every
// mapping moves into it and the old rules and sockets are gone.
func TestAgent_portRangeChange(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	n := e.node(node2)
	for i := range 2 {
		e.createPod(t, webPod(ns, fmt.Sprintf("web-%d", i), node2, web))
	}
	e.createService(t, npService(ns, "web", web))
	old := map[string]int{}
	for i := range 2 {
		name := fmt.Sprintf("web-%d", i)
		old[name] = e.waitEntries(t, ns, name, 1)[0].NodePort
	}
	e.restartAgent(t, node2, "61800-61899", nil)
	t.Cleanup(func() { e.restartAgent(t, node2, "61000-62000", nil) })
	for name, oldPort := range old {
		waitFor(t, 20*time.Second, name+" moved into 61800-61899", func() (bool, error) {
			es, ok, err := e.entries(t, ns, name)
			return ok && err == nil && len(es) == 1 && es[0].NodePort >= 61800 && es[0].NodePort <= 61899, nil
		})
		x := e.waitEntries(t, ns, name, 1)[0]
		eventually(t, 10*time.Second, "traffic in the new range", func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))(name) })
		if oldPort < 61800 || oldPort > 61899 {
			if hasRule(t, n, "tcp", oldPort) || portHeld(t, n, "tcp", oldPort) {
				t.Errorf("%s: old node port %d still has a rule or socket", name, oldPort)
			}
		}
	}
}

// TestAgent_rangeExhaustion: when the range is exhausted the Pod gets a
// Warning Event and the failure metric grows; it is mapped as soon as a port
// frees.
func TestAgent_rangeExhaustion(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	e.restartAgent(t, node2, "61950-61951", nil)
	t.Cleanup(func() { e.restartAgent(t, node2, "61000-62000", nil) })
	e.createService(t, npService(ns, "web", web))
	for i := range 2 {
		name := fmt.Sprintf("web-%d", i)
		e.createPod(t, webPod(ns, name, node2, web))
		e.waitEntries(t, ns, name, 1)
	}
	e.createPod(t, webPod(ns, "starved", node2, web))
	waitFor(t, 20*time.Second, "NodePortExhausted event on the starved Pod", func() (bool, error) {
		evs, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": "starved", "reason": "NodePortExhausted"}.String(),
		})
		return err == nil && len(evs.Items) > 0, err
	})
	if _, ok, _ := e.entries(t, ns, "starved"); ok {
		t.Error("the starved Pod has an annotation")
	}
	if v, err := e.agent(node2).Metric("npl_agent_allocation_failures_total"); err != nil || v < 1 {
		t.Errorf("npl_agent_allocation_failures_total = %v (err %v), want > 0", v, err)
	}
	if v, err := e.agent(node2).Metric("npl_agent_free_ports", `protocol="tcp"`); err != nil || v != 0 {
		t.Errorf("npl_agent_free_ports{tcp} = %v (err %v), want 0", v, err)
	}
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	x := e.waitEntries(t, ns, "starved", 1)[0]
	eventually(t, 10*time.Second, "traffic to the recovered Pod", func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))("starved") })
}

// TestAgent_cleanupLeavesNothing: `npl-agent cleanup` removes the chains, the
// jumps and the annotations of its node; a restarted agent maps again.
func TestAgent_cleanupLeavesNothing(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	e.createPod(t, webPod(ns, "web", node0, web))
	e.createService(t, npService(ns, "web", web))
	e.waitEntries(t, ns, "web", 1)
	n := e.node(node0)
	a := e.agent(node0)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	out, err := a.Cleanup(context.Background())
	if err != nil {
		t.Fatalf("npl-agent cleanup: %v\n%s", err, out)
	}
	if rules := natRules(t, n); strings.Contains(rules, "NPL-") {
		t.Errorf("NPL chains or jumps left after cleanup:\n%s", rules)
	}
	pods, err := e.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node0).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if _, ok := p.Annotations[contract.PodKey]; ok {
			t.Errorf("pod %s/%s keeps its annotation after cleanup", p.Namespace, p.Name)
		}
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	x := e.waitEntries(t, ns, "web", 1)[0]
	eventually(t, 10*time.Second, "traffic after re-install", func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))("web") })
}

// udpEcho sends one datagram from the test namespace.
func udpEcho(target, payload string) (string, error) { return stack.UDPEcho(target, payload) }
