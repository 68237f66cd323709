package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
)

const (
	node0 = "npl-node-0"
	node1 = "npl-node-1"
	node2 = "npl-node-2"
)

var web = map[string]string{"app": "web"}

// TestAgent_distinctPortsAndTrafficFromEverywhere: three Pods behind one
// Service on one node get distinct node ports, each of which reaches its own
// Pod from outside the node, from the node itself and from a Pod on the same
// node (hairpin, itself and a neighbour); rules and sockets exist.
func TestAgent_distinctPortsAndTrafficFromEverywhere(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		for i := range 3 {
			e.createPod(t, webPod(ns, fmt.Sprintf("web-%d", i), node0, web))
		}
		e.createService(t, npService(ns, "web", web))
		n := e.node(node0)
		seen := map[int]bool{}
		for i := range 3 {
			pod := fmt.Sprintf("web-%d", i)
			es := e.waitEntries(t, ns, pod, 1)
			got := es[0]
			want := contract.Entry{PodPort: 8080, NodeIP: n.IP.String(), NodePort: got.NodePort, Protocol: "tcp", IPFamily: "IPv4"}
			if got != want {
				t.Errorf("%s entry = %+v, want %+v", pod, got, want)
			}
			if got.NodePort < 61000 || got.NodePort > 62000 || seen[got.NodePort] {
				t.Errorf("%s nodePort %d is out of range or reused (seen %v)", pod, got.NodePort, seen)
			}
			seen[got.NodePort] = true
			if !e.hasMapping(t, n, "tcp", got.NodePort) || !portHeld(t, n, "tcp", got.NodePort) {
				t.Errorf("%s: rule or socket missing for node port %d", pod, got.NodePort)
			}
			target := addr(got.NodeIP, got.NodePort)
			eventually(t, 10*time.Second, "traffic from the test namespace to "+target, func() error {
				return expectBody(get(target))(pod)
			})
			if err := expectBody(getFrom(n, target))(pod); err != nil {
				t.Errorf("from the node itself: %v", err)
			}
			if err := expectBody(e.getFromPod(ns, pod, target))(pod); err != nil {
				t.Errorf("self-hairpin from %s: %v", pod, err)
			}
			neighbour := fmt.Sprintf("web-%d", (i+1)%3)
			if err := expectBody(e.getFromPod(ns, neighbour, target))(pod); err != nil {
				t.Errorf("same-node hairpin from %s: %v", neighbour, err)
			}
		}
		// A node that runs no backend opens no port.
		if strings.Contains(e.dp.dump(t, e.node(node1), contract.FamilyIPv4), "\""+ns+"/") {
			t.Errorf("node %s has rules for namespace %s though it runs none of its Pods", node1, ns)
		}
	})
}

func expectBody(body string, err error) func(want string) error {
	return func(want string) error {
		if err != nil {
			return err
		}
		if body != want {
			return fmt.Errorf("answered by %q, want %q", body, want)
		}
		return nil
	}
}

// TestAgent_multiPortNamedPortAndTCPUDP: a multi-port Service with a named
// targetPort, and TCP and UDP on the same Pod port, get separate node ports
// that all carry traffic; removing one port removes only its mapping. A node
// port number serves one mapping whatever the protocol: AKO and F5 CIS match
// entries by podPort and ignore the protocol (issue 13).
func TestAgent_multiPortNamedPortAndTCPUDP(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		e.createPod(t, webPod(ns, "multi", node1, web, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
				corev1.ContainerPort{Name: "dns-tcp", ContainerPort: 5353, Protocol: corev1.ProtocolTCP},
				corev1.ContainerPort{Name: "admin", ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
		}))
		e.createService(t, npService(ns, "multi", web,
			corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
			corev1.ServicePort{Name: "admin", Port: 90, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9090)},
			corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(5353)},
			corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
		))
		es := e.waitEntries(t, ns, "multi", 4)
		byKey := map[string]contract.Entry{}
		numbers := map[int]bool{}
		for _, x := range es {
			byKey[fmt.Sprintf("%s/%d", x.Protocol, x.PodPort)] = x
			numbers[x.NodePort] = true
		}
		for _, k := range []string{"tcp/8080", "tcp/9090", "tcp/5353", "udp/5353"} {
			if _, ok := byKey[k]; !ok {
				t.Fatalf("no entry for %s in %+v", k, es)
			}
		}
		if len(numbers) != 4 {
			t.Errorf("entries share node port numbers: %+v", es)
		}
		n := e.node(node1)
		if dnsTCP, dnsUDP := byKey["tcp/5353"], byKey["udp/5353"]; dnsTCP.NodePort == dnsUDP.NodePort {
			t.Errorf("TCP and UDP of Pod port 5353 share node port %d", dnsTCP.NodePort)
		} else if e.hasMapping(t, n, "udp", dnsTCP.NodePort) || e.hasMapping(t, n, "tcp", dnsUDP.NodePort) {
			t.Errorf("a rule of the other protocol exists on %d (tcp) or %d (udp)", dnsTCP.NodePort, dnsUDP.NodePort)
		}
		for _, k := range []string{"tcp/8080", "tcp/9090", "tcp/5353"} {
			x := byKey[k]
			eventually(t, 10*time.Second, "TCP "+k, func() error { return expectBody(get(addr(x.NodeIP, x.NodePort)))("multi") })
		}
		udp := byKey["udp/5353"]
		eventually(t, 10*time.Second, "UDP echo", func() error {
			reply, err := udpEcho(addr(udp.NodeIP, udp.NodePort), "ping")
			if err != nil {
				return err
			}
			if reply != "multi: ping" {
				return fmt.Errorf("UDP reply %q", reply)
			}
			return nil
		})

		udpFlows := func() string {
			out, _ := e.node(node1).Command(context.Background(), "conntrack", "-L", "-p", "udp", "--orig-port-dst", fmt.Sprint(udp.NodePort)).CombinedOutput()
			return string(out)
		}
		if !strings.Contains(udpFlows(), fmt.Sprintf("dport=%d ", udp.NodePort)) {
			t.Fatalf("no conntrack entry for the UDP flow to %d:\n%s", udp.NodePort, udpFlows())
		}

		// Removing the UDP port keeps the TCP entry on the same Pod port.
		e.updateService(t, ns, "multi", func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:3] })
		es = e.waitEntries(t, ns, "multi", 3)
		for _, x := range es {
			if x.Protocol == "udp" {
				t.Errorf("UDP entry still there: %+v", es)
			}
		}
		waitFor(t, 10*time.Second, "UDP rule and socket released", func() (bool, error) {
			return !e.hasMapping(t, n, "udp", udp.NodePort) && !portHeld(t, n, "udp", udp.NodePort), nil
		})
		// The UDP flow the echo created is gone from conntrack, so a client
		// reusing its source port is not sent to the old Pod.
		waitFor(t, 10*time.Second, "UDP conntrack entries flushed", func() (bool, error) {
			return !strings.Contains(udpFlows(), fmt.Sprintf("dport=%d ", udp.NodePort)), nil
		})
		if tcp := byKey["tcp/5353"]; !e.hasMapping(t, n, "tcp", tcp.NodePort) {
			t.Errorf("TCP rule for 5353 was removed with the UDP port")
		}
	})
}

// TestAgent_removalTriggers: each way a Pod stops being selected removes the
// annotation, the rule and the socket; undoing it maps the Pod again.
func TestAgent_removalTriggers(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		cases := []struct {
			name   string
			remove func(t *testing.T, ns string)
			undo   func(t *testing.T, ns string)
		}{
			{"annotation false",
				func(t *testing.T, ns string) { e.setOptIn(t, ns, "false") },
				func(t *testing.T, ns string) { e.setOptIn(t, ns, "true") }},
			{"annotation removed",
				func(t *testing.T, ns string) { e.setOptIn(t, ns, "") },
				func(t *testing.T, ns string) { e.setOptIn(t, ns, "true") }},
			{"type NodePort",
				func(t *testing.T, ns string) {
					e.updateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
				},
				func(t *testing.T, ns string) {
					e.updateService(t, ns, "web", func(s *corev1.Service) {
						s.Spec.Type = corev1.ServiceTypeClusterIP
						for i := range s.Spec.Ports {
							s.Spec.Ports[i].NodePort = 0
						}
					})
				}},
			{"selector no longer matches",
				func(t *testing.T, ns string) {
					e.updateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "other"} })
				},
				func(t *testing.T, ns string) {
					e.updateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Selector = web })
				}},
			{"pod labels no longer match",
				func(t *testing.T, ns string) {
					e.updatePod(t, ns, "web", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "gone"} })
				},
				func(t *testing.T, ns string) { e.updatePod(t, ns, "web", func(p *corev1.Pod) { p.Labels = web }) }},
			{"named port no longer resolves",
				func(t *testing.T, ns string) {
					e.updateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("nope") })
				},
				func(t *testing.T, ns string) {
					e.updateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") })
				}},
			{"service deleted",
				func(t *testing.T, ns string) {
					if err := e.client.CoreV1().Services(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				func(t *testing.T, ns string) { e.createService(t, namedService(ns)) }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ns := e.namespace(t)
				e.createPod(t, webPod(ns, "web", node2, web))
				e.createService(t, namedService(ns))
				before := e.waitEntries(t, ns, "web", 1)[0]
				n := e.node(node2)
				eventually(t, 10*time.Second, "traffic before", func() error {
					return expectBody(get(addr(before.NodeIP, before.NodePort)))("web")
				})

				tc.remove(t, ns)
				e.waitNoAnnotation(t, ns, "web")
				waitFor(t, 10*time.Second, "rule and socket released", func() (bool, error) {
					return !e.hasMapping(t, n, "tcp", before.NodePort) && !portHeld(t, n, "tcp", before.NodePort), nil
				})
				if _, err := get(addr(before.NodeIP, before.NodePort)); err == nil {
					t.Errorf("node port %d still answers after removal", before.NodePort)
				}

				tc.undo(t, ns)
				after := e.waitEntries(t, ns, "web", 1)[0]
				eventually(t, 10*time.Second, "traffic after undo", func() error {
					return expectBody(get(addr(after.NodeIP, after.NodePort)))("web")
				})
			})
		}
	})
}

func namedService(ns string) *corev1.Service {
	return npService(ns, "web", web, corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")})
}

// setOptIn sets the Service's opt-in annotation; "" removes it.
func (e *env) setOptIn(t *testing.T, ns, value string) {
	e.updateService(t, ns, "web", func(s *corev1.Service) {
		if value == "" {
			delete(s.Annotations, contract.ServiceEnabledKey)
			return
		}
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[contract.ServiceEnabledKey] = value
	})
}

// TestAgent_podLifecycle: deleting a Pod removes its rule and socket; a Pod
// IP change rewrites the rule at the same node port; a Pod that completes
// loses its mapping.
func TestAgent_podLifecycle(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		n := e.node(node1)
		e.createPod(t, webPod(ns, "moving", node1, web))
		e.createPod(t, webPod(ns, "doomed", node1, web))
		e.createService(t, npService(ns, "web", web))
		moving := e.waitEntries(t, ns, "moving", 1)[0]
		doomed := e.waitEntries(t, ns, "doomed", 1)[0]

		// IP change: same node port, new destination.
		oldIP := e.podIP(t, ns, "moving")
		newIP, err := e.c.ChangePodIP(context.Background(), ns, "moving")
		if err != nil {
			t.Fatalf("change pod IP: %v", err)
		}
		if newIP.String() == oldIP {
			t.Fatalf("pod IP did not change (%s)", oldIP)
		}
		waitFor(t, 15*time.Second, "rule rewritten to the new Pod IP", func() (bool, error) {
			return e.target(t, n, "tcp", moving.NodePort) == addr(newIP.String(), 8080), nil
		})
		eventually(t, 10*time.Second, "traffic to the moved Pod", func() error {
			return expectBody(get(addr(moving.NodeIP, moving.NodePort)))("moving")
		})
		if got := e.waitEntries(t, ns, "moving", 1)[0]; got.NodePort != moving.NodePort {
			t.Errorf("node port changed with the Pod IP: %d -> %d", moving.NodePort, got.NodePort)
		}

		// Deletion.
		if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "rule and socket of the deleted Pod gone", func() (bool, error) {
			return !e.hasMapping(t, n, "tcp", doomed.NodePort) && !portHeld(t, n, "tcp", doomed.NodePort), nil
		})
	})
}

func (e *env) podIP(t *testing.T, ns, name string) string {
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

// TestAgent_hostPortShortcut: a container port with a hostPort of the same
// protocol is published as that hostPort, with no rule and no socket.
func TestAgent_hostPortShortcut(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		e.createPod(t, webPod(ns, "hp", node2, web, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 18080 }))
		e.createService(t, npService(ns, "web", web))
		got := e.waitEntries(t, ns, "hp", 1)[0]
		if got.NodePort != 18080 {
			t.Fatalf("nodePort = %d, want the hostPort 18080", got.NodePort)
		}
		n := e.node(node2)
		if e.hasMapping(t, n, "tcp", 18080) || portHeld(t, n, "tcp", 18080) {
			t.Errorf("a rule or socket exists for the hostPort")
		}
	})
}

// TestAgent_repairsHandWrittenAnnotations: malformed and out-of-range
// annotations written by hand are replaced with valid ones.
func TestAgent_repairsHandWrittenAnnotations(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		e.createPod(t, webPod(ns, "web", node0, web))
		e.createService(t, npService(ns, "web", web))
		good := e.waitEntries(t, ns, "web", 1)[0]
		for _, bad := range []string{
			`{not json`,
			fmt.Sprintf(`[{"podPort":8080,"nodeIP":"%s","nodePort":70000,"protocol":"tcp","ipFamily":"IPv4"}]`, good.NodeIP),
			fmt.Sprintf(`[{"podPort":8080,"nodeIP":"%s","nodePort":1234,"protocol":"tcp"}]`, good.NodeIP),
		} {
			e.patchPodAnnotation(t, ns, "web", bad)
			waitFor(t, 15*time.Second, "annotation repaired after "+bad, func() (bool, error) {
				es, ok, err := e.entries(t, ns, "web")
				return ok && err == nil && len(es) == 1 && es[0] == good, nil
			})
		}
	})
}

func (e *env) patchPodAnnotation(t *testing.T, ns, name, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, contract.PodKey, value)
	if _, err := e.client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch annotation: %v", err)
	}
}

// TestAgent_repairsDriftWithoutRestart: a rule and a jump deleted by hand, and
// a flushed chain, come back through the periodic check.
func TestAgent_repairsDriftWithoutRestart(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		e.createPod(t, webPod(ns, "web", node0, web))
		e.createService(t, npService(ns, "web", web))
		x := e.waitEntries(t, ns, "web", 1)[0]
		n := e.node(node0)
		target := addr(x.NodeIP, x.NodePort)
		eventually(t, 10*time.Second, "traffic", func() error { return expectBody(get(target))("web") })
		repairsBefore, _ := e.agent(node0).Metric("npl_agent_drift_repairs_total")

		e.dp.deleteMapping(t, n, x.NodePort)
		if e.hasMapping(t, n, "tcp", x.NodePort) {
			t.Fatal("rule still there after deleting it by hand")
		}
		waitFor(t, 15*time.Second, "deleted rule repaired", func() (bool, error) { return e.hasMapping(t, n, "tcp", x.NodePort), nil })

		hooked := e.dp.deleteHook(t, n)
		if hooked() {
			t.Fatal("jump still there after deleting it by hand")
		}
		waitFor(t, 15*time.Second, "deleted jump repaired", func() (bool, error) {
			return hooked(), nil
		})

		e.dp.deleteAll(t, n)
		waitFor(t, 15*time.Second, "flushed chain repaired", func() (bool, error) { return e.hasMapping(t, n, "tcp", x.NodePort), nil })
		eventually(t, 10*time.Second, "traffic after repairs", func() error { return expectBody(get(target))("web") })
		repairsAfter, err := e.agent(node0).Metric("npl_agent_drift_repairs_total")
		// The deleted jump can only come back through a drift check; the rule
		// and the chain may also come back with a write caused by other Pods.
		if err != nil || repairsAfter < repairsBefore+1 {
			t.Errorf("npl_agent_drift_repairs_total = %v (err %v), want more than %v", repairsAfter, err, repairsBefore)
		}
	})
}

// TestAgent_unmappablePortGetsAnEvent: a Service port the agent cannot map
// (SCTP) gets a Warning Event naming it, and the other ports are mapped.
func TestAgent_unmappablePortGetsAnEvent(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		e.createPod(t, webPod(ns, "web", node0, web))
		e.createService(t, npService(ns, "web", web,
			corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)},
			corev1.ServicePort{Name: "sig", Port: 3868, Protocol: corev1.ProtocolSCTP, TargetPort: intstr.FromInt32(3868)},
		))
		if got := e.waitEntries(t, ns, "web", 1)[0]; got.Protocol != "tcp" || got.PodPort != 8080 {
			t.Errorf("entry = %+v, want the TCP port only", got)
		}
		waitFor(t, 20*time.Second, "a NodePortLocalSkipped event naming the SCTP port", func() (bool, error) {
			evs, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if ev.InvolvedObject.Kind == "Service" && ev.Reason == "NodePortLocalSkipped" && ev.Type == corev1.EventTypeWarning &&
					strings.Contains(ev.Message, "SCTP/3868") {
					return true, nil
				}
			}
			return false, nil
		})
	})
}
