package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/stack"
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
	forEachDatapath(t, func(t *testing.T, e *env) {
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
	})
}

// TestAgent_portRangeChange: after a restart with a range that holds
// neither Pod's node port, both Pods get new ports in it. The old port of
// one keeps forwarding to its Pod, held by the agent's socket, until
// --retired-port-grace has passed; the old port of the other, which a host
// process bound while the agent was down, gets no rule: its traffic reaches
// that process, not the Pod.
func TestAgent_portRangeChange(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		n := e.node(node2)
		for i := range 2 {
			e.createPod(t, webPod(ns, fmt.Sprintf("web-%d", i), node2, web))
		}
		e.createService(t, npService(ns, "web", web))
		const kept, taken = "web-0", "web-1"
		old := map[string]int{}
		for _, name := range []string{kept, taken} {
			old[name] = e.waitEntries(t, ns, name, 1)[0].NodePort
			if old[name] >= 61800 && old[name] <= 61899 {
				t.Fatalf("%s's node port %d is in 61800-61899: the test needs it outside", name, old[name])
			}
		}
		var restarted time.Time
		e.restartAgent(t, node2, "61800-61899", func() {
			// A host process takes the taken Pod's port, free while the
			// agent is down.
			var l net.Listener
			if err := n.Do(func() (err error) {
				l, err = net.Listen("tcp4", addr("0.0.0.0", old[taken]))
				return err
			}); err != nil {
				t.Fatalf("a host process binds %d: %v", old[taken], err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "host") })}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })
			restarted = time.Now()
		})
		t.Cleanup(func() { e.restartAgent(t, node2, "61000-62000", nil) })
		grace := e.agent(node2).RetiredPortGrace()
		for _, name := range []string{kept, taken} {
			waitFor(t, 20*time.Second, name+" moved into 61800-61899", func() (bool, error) {
				es, ok, err := e.entries(t, ns, name)
				return ok && err == nil && len(es) == 1 && es[0].NodePort >= 61800 && es[0].NodePort <= 61899, nil
			})
			x := e.waitEntries(t, ns, name, 1)[0]
			eventually(t, 10*time.Second, "traffic in the new range", func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))(name) })
		}
		nodeIP := n.IP.String()

		// Make before break: the kept Pod's old port still forwards to it,
		// held by the agent's socket, until the grace has passed.
		err := expectBody(get(addr(nodeIP, old[kept])))(kept)
		held := portHeld(t, n, "tcp", old[kept])
		if late := time.Since(restarted); late < grace-2*time.Second && (err != nil || !held) {
			t.Errorf("%s: old node port %d %v after the restart: %v, held %v; want it to forward to the Pod for %v, held", kept, old[kept], late.Round(time.Millisecond), err, held, grace)
		} else if err != nil || !held {
			t.Logf("%s: old node port %d not checked: %v after the restart, near the end of the grace %v", kept, old[kept], late, grace)
		}
		// The host process's port is its own.
		if e.hasMapping(t, n, "tcp", old[taken]) {
			t.Errorf("%s: old node port %d, bound by a host process, has a rule", taken, old[taken])
		}
		if err := expectBody(get(addr(nodeIP, old[taken])))("host"); err != nil {
			t.Errorf("%s: old node port %d, bound by a host process: %v; want the host process to answer", taken, old[taken], err)
		}

		waitFor(t, grace+20*time.Second, fmt.Sprintf("%s: old node port %d's rule gone after the grace", kept, old[kept]), func() (bool, error) {
			return !e.hasMapping(t, n, "tcp", old[kept]), nil
		})
		waitFor(t, 10*time.Second, fmt.Sprintf("%s: old node port %d's socket closed after the grace", kept, old[kept]), func() (bool, error) {
			return !portHeld(t, n, "tcp", old[kept]), nil
		})
	})
}

// fallbackRetry is the agent's slow retry of a Pod that could not get every
// node port (exhaustedRetry in agent/controller).
const fallbackRetry = 30 * time.Second

// beforeFallback is how long is left until the agent's fallback retry of a
// Pod could fire, given the Pod's first NodePortExhausted Event: the failed
// sync records the Event before it schedules the retry, and the API keeps
// FirstTimestamp rounded down to the second, so the retry fires after
// FirstTimestamp+fallbackRetry; a second less leaves room for the last check
// of the wait. A wait bounded by it can only succeed through the retry the
// agent makes as soon as a port frees. The test frees a port within a second
// or two of the Event, so this leaves the agent most of the 30 s: a datapath
// write on a loaded machine can take seconds (a full-suite run on the shared
// 2-core machine once missed a 10 s bound).
func beforeFallback(first corev1.Event) time.Duration {
	return time.Until(first.FirstTimestamp.Add(fallbackRetry - time.Second))
}

// deletePod deletes a Pod at once (the test Pods have no grace period).
func (e *env) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
}

// waitEvent waits for an Event with reason on the Pod and checks it is a
// Warning whose message contains text. With several, it returns the first.
func (e *env) waitEvent(t *testing.T, ns, pod, reason, text string) corev1.Event {
	t.Helper()
	var found corev1.Event
	waitFor(t, 20*time.Second, reason+" event on "+pod, func() (bool, error) {
		evs, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": pod, "reason": reason}.String(),
		})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		found = slices.MinFunc(evs.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
		return true, nil
	})
	if found.Type != corev1.EventTypeWarning || !strings.Contains(found.Message, text) {
		t.Errorf("%s event on %s = %s %q, want a Warning that mentions %q", reason, pod, found.Type, found.Message, text)
	}
	return found
}

// TestAgent_rangeExhaustion: when the range is exhausted the Pod gets a
// Warning Event and the failure metric grows; it is mapped as soon as a port
// frees, before the agent's fallback retry could fire. A multi-port Pod that
// gets only some of its ports publishes those, and the rest as ports free.
func TestAgent_rangeExhaustion(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		const portRange = "61950-61951"
		e.restartAgent(t, node2, portRange, nil)
		t.Cleanup(func() { e.restartAgent(t, node2, "61000-62000", nil) })
		t.Cleanup(func() {
			// Before the restart above, which would bury it.
			if t.Failed() {
				t.Logf("npl-agent/%s log while the range was %s:\n%s", node2, portRange, e.agent(node2).Tail(150))
			}
		})
		e.createService(t, npService(ns, "web", web))
		for i := range 2 {
			name := fmt.Sprintf("web-%d", i)
			e.createPod(t, webPod(ns, name, node2, web))
			e.waitEntries(t, ns, name, 1)
		}

		// A single-port Pod starves.
		e.createPod(t, webPod(ns, "starved", node2, web))
		starvedEvent := e.waitEvent(t, ns, "starved", "NodePortExhausted", portRange)
		if _, ok, _ := e.entries(t, ns, "starved"); ok {
			t.Error("the starved Pod has an annotation")
		}
		a := e.agent(node2)
		if v, err := a.Metric("npl_agent_allocation_failures_total"); err != nil || v < 1 {
			t.Errorf("npl_agent_allocation_failures_total = %v (err %v), want > 0", v, err)
		}
		// Two TCP mappings hold both numbers, so none is left for UDP either.
		for _, proto := range []string{"tcp", "udp"} {
			if v, err := a.Metric("npl_agent_free_ports", fmt.Sprintf("protocol=%q", proto)); err != nil || v != 0 {
				t.Errorf("npl_agent_free_ports{%s} = %v (err %v), want 0", proto, v, err)
			}
		}
		e.deletePod(t, ns, "web-0")
		waitFor(t, beforeFallback(starvedEvent), "the starved Pod mapped after web-0 freed its port", func() (bool, error) {
			es, ok, err := e.entries(t, ns, "starved")
			return ok && err == nil && len(es) == 1, err
		})
		x := e.waitEntries(t, ns, "starved", 1)[0]
		eventually(t, 10*time.Second, "traffic to the recovered Pod", func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))("starved") })

		// A Pod with a TCP and a UDP port while the range is full: each freed
		// number is published at once, one at a time. The fallback retry of the
		// first failure, which the retries of the partial one do not postpone,
		// bounds both waits.
		multi := map[string]string{"app": "multi"}
		e.createService(t, npService(ns, "multi", multi,
			corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
			corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")}))
		e.createPod(t, webPod(ns, "multi", node2, multi))
		multiEvent := e.waitEvent(t, ns, "multi", "NodePortExhausted", portRange)
		if _, ok, _ := e.entries(t, ns, "multi"); ok {
			t.Error("the multi-port Pod has an annotation while the range is full")
		}
		e.deletePod(t, ns, "web-1")
		waitFor(t, beforeFallback(multiEvent), "one port of the multi-port Pod published after web-1 freed its port", func() (bool, error) {
			es, ok, err := e.entries(t, ns, "multi")
			return ok && err == nil && len(es) == 1, err
		})
		partial, _, err := e.entries(t, ns, "multi")
		if err != nil || len(partial) != 1 {
			t.Fatalf("multi-port Pod entries = %+v (err %v), want exactly one", partial, err)
		}

		e.deletePod(t, ns, "starved")
		waitFor(t, beforeFallback(multiEvent), "both ports of the multi-port Pod published after starved freed its port", func() (bool, error) {
			es, ok, err := e.entries(t, ns, "multi")
			return ok && err == nil && len(es) == 2, err
		})
		es := e.waitEntries(t, ns, "multi", 2)
		if es[0].NodePort == es[1].NodePort || es[0].Protocol == es[1].Protocol {
			t.Errorf("multi-port Pod entries = %+v, want a TCP and a UDP entry on distinct node ports", es)
		}
		if !slices.Contains(es, partial[0]) {
			t.Errorf("multi-port Pod entries = %+v, want the entry published first kept: %+v", es, partial[0])
		}
		for _, x := range es {
			expectMultiTraffic(t, x)
		}
	})
}

// expectMultiTraffic checks that the entry of the Pod "multi" carries
// traffic: HTTP on TCP, an echo on UDP.
func expectMultiTraffic(t *testing.T, x contract.Entry) {
	t.Helper()
	target := addr(x.NodeIP, x.NodePort)
	if x.Protocol == contract.ProtocolTCP {
		eventually(t, 10*time.Second, "TCP traffic to "+target, func() error { return expectBody(get(target))("multi") })
		return
	}
	eventually(t, 10*time.Second, "UDP traffic to "+target, func() error {
		reply, err := udpEcho(target, "ping")
		if err != nil {
			return err
		}
		if reply != "multi: ping" {
			return fmt.Errorf("UDP reply %q", reply)
		}
		return nil
	})
}

// TestAgent_restoreMovesASharedNodePort: an annotation an older npl wrote,
// with TCP and UDP of one Pod port on one number, is repaired on restart by
// moving the UDP mapping alone: the TCP node port stays, the Pod gets a
// Warning Event naming the old and the new port, and both carry traffic.
func TestAgent_restoreMovesASharedNodePort(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		n := e.node(node1)
		e.createPod(t, webPod(ns, "dns", node1, web, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
				corev1.ContainerPort{Name: "dns-tcp", ContainerPort: 5353, Protocol: corev1.ProtocolTCP})
		}))
		e.createService(t, npService(ns, "dns", web,
			corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(5353)},
			corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)}))
		es := e.waitEntries(t, ns, "dns", 2)
		var tcpEntry contract.Entry
		for _, x := range es {
			if x.Protocol == contract.ProtocolTCP {
				tcpEntry = x
			}
		}
		shared := tcpEntry.NodePort

		// The state an older npl left: both entries on the TCP number, written
		// with the product's own formatter while the agent is down.
		e.restartAgent(t, node1, "61000-62000", func() {
			old := slices.Clone(es)
			for i := range old {
				old[i].NodePort = shared
			}
			value, err := contract.Format(old)
			if err != nil {
				t.Fatal(err)
			}
			e.patchPodAnnotation(t, ns, "dns", value)
		})

		var udpEntry contract.Entry
		waitFor(t, 20*time.Second, "the UDP mapping moved off the shared number", func() (bool, error) {
			got, ok, err := e.entries(t, ns, "dns")
			if !ok || err != nil || len(got) != 2 {
				return false, err
			}
			for _, x := range got {
				if x.Protocol == contract.ProtocolUDP {
					udpEntry = x
				}
			}
			return udpEntry.NodePort != shared, nil
		})
		got := e.waitEntries(t, ns, "dns", 2)
		wantTCP := tcpEntry
		if !slices.Contains(got, wantTCP) {
			t.Errorf("entries after the restart = %+v, want the TCP entry unchanged: %+v", got, wantTCP)
		}
		e.waitEvent(t, ns, "dns", "NodePortReallocated", fmt.Sprintf("udp/5353 (IPv4) moved from %d to %d", shared, udpEntry.NodePort))
		if e.hasMapping(t, n, "udp", shared) {
			t.Errorf("a UDP rule is left on the TCP node port %d", shared)
		}
		eventually(t, 10*time.Second, "TCP traffic on the kept number", func() error {
			return expectBody(get(addr(tcpEntry.NodeIP, shared)))("dns")
		})
		eventually(t, 10*time.Second, "UDP traffic on the new number", func() error {
			reply, err := udpEcho(addr(udpEntry.NodeIP, udpEntry.NodePort), "ping")
			if err != nil {
				return err
			}
			if reply != "dns: ping" {
				return fmt.Errorf("UDP reply %q", reply)
			}
			return nil
		})
	})
}

// TestAgent_cleanupLeavesNothing: `npl-agent cleanup` removes the chains, the
// jumps and the annotations of its node; a restarted agent maps again.
func TestAgent_cleanupLeavesNothing(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
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
		if rules := e.dp.dump(t, n, contract.FamilyIPv4); rules != "" {
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
	})
}

// udpEcho sends one datagram from the test namespace.
func udpEcho(target, payload string) (string, error) { return stack.UDPEcho(target, payload) }
