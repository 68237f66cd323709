package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestDualStack runs npl on a dual-stack cluster (IPv4 and IPv6 on every
// node and Pod): IPv6-only and dual-stack Services get one entry per family
// they ask for, the IPv6 node ports carry TCP and UDP from everywhere, an
// agent restart keeps every family's ports, removal clears both families,
// and npl-lbsync builds pools of the family it is configured for; once per
// datapath backend, each on a dual-stack cluster of its own.
func TestDualStack(t *testing.T) {
	for _, dp := range datapaths {
		t.Run(dp.backend(), func(t *testing.T) { testDualStack(t, stack.AgentOptions{Datapath: dp.backend()}) })
	}
}

// testDualStack is the body of TestDualStack for agents started with opts,
// whose Datapath names the backend (one of datapaths).
func testDualStack(t *testing.T, opts stack.AgentOptions) {
	e := dualStackEnv(t, opts)
	t.Run("IPv6-only and dual-stack Services: entries, traffic, restart, removal", func(t *testing.T) {
		testDualStackAgent(t, e)
	})
	t.Run("a Service upgraded to dual-stack gains IPv6 entries, downgraded loses them", func(t *testing.T) {
		testDualStackUpgrade(t, e)
	})
	t.Run("npl-lbsync builds members of its ipFamily and serves an IPv6 VIP", func(t *testing.T) {
		testDualStackLBSync(t, e)
	})
}

// dualStackEnv starts a dual-stack cluster of two nodes with an agent on
// each, started with opts; both stop at the end of the test. One cluster
// runs per process, so the package's shared IPv4 cluster is closed first;
// setup starts it again for the tests that follow.
func dualStackEnv(t *testing.T, opts stack.AgentOptions) *env {
	t.Helper()
	if shared != nil {
		stack.StopAgents(shared.agents)
		shared = nil
	}
	if err := cluster.CloseShared(); err != nil {
		t.Fatalf("close the shared IPv4 cluster: %v", err)
	}
	ctx := ctxFor(t, 3*time.Minute)
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 2, DualStack: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close the dual-stack cluster: %v", err)
		}
	})
	t.Logf("dual-stack cluster started in %v", c.StartDuration())
	agents, err := stack.StartAgents(ctx, c, opts)
	if err != nil {
		t.Fatalf("start agents: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range agents {
				t.Logf("--- %s log tail:\n%s", a.Name, a.Tail(25))
			}
		}
		stack.StopAgents(agents)
	})
	e := &env{c: c, client: c.Client(), agents: agents}
	for _, dp := range datapaths {
		if dp.backend() == opts.Datapath {
			e.dp = dp
		}
	}
	if e.dp == nil {
		t.Fatalf("agent option Datapath %q is none of the backends the tests read", opts.Datapath)
	}
	return e
}

// nodeIPOf is the node's address of the family.
func nodeIPOf(n *cluster.Node, f contract.Family) netip.Addr {
	if f == contract.FamilyIPv6 {
		return n.IPv6
	}
	return n.IP
}

// hasRuleOf reports whether the node DNATs nodePort/proto of the family to
// the Pod address target; nodePort 0 matches any.
func (e *env) hasRuleOf(t *testing.T, n *cluster.Node, f contract.Family, proto contract.Protocol, nodePort int, target netip.AddrPort) bool {
	t.Helper()
	for key, to := range e.dp.targets(t, n, f) {
		p, port, _ := strings.Cut(key, "/")
		if p == string(proto) && (nodePort == 0 || port == strconv.Itoa(nodePort)) && to == target.String() {
			return true
		}
	}
	return false
}

// podIPOf is the Pod's address of the family.
func (e *env) podIPOf(t *testing.T, ns, name string, f contract.Family) netip.Addr {
	t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && contract.FamilyOf(a) == f {
			return a
		}
	}
	t.Fatalf("pod %s/%s has no %s address (podIPs %v)", ns, name, f, p.Status.PodIPs)
	return netip.Addr{}
}

// waitFamilyEntries waits until the Pod's annotation holds exactly the
// entries for tcp/8080 and udp/5353 in each of families on node n, and
// returns them by "protocol/family".
func (e *env) waitFamilyEntries(t *testing.T, ns, pod string, n *cluster.Node, families ...contract.Family) map[string]contract.Entry {
	t.Helper()
	es := e.waitEntries(t, ns, pod, 2*len(families))
	got := map[string]contract.Entry{}
	for _, x := range es {
		got[string(x.Protocol)+"/"+string(x.IPFamily)] = x
	}
	for _, f := range families {
		for _, want := range []contract.Entry{
			{PodPort: 8080, Protocol: contract.ProtocolTCP, IPFamily: f},
			{PodPort: 5353, Protocol: contract.ProtocolUDP, IPFamily: f},
		} {
			x, ok := got[string(want.Protocol)+"/"+string(f)]
			want.NodeIP, want.NodePort = nodeIPOf(n, f).String(), x.NodePort
			if !ok || x != want {
				t.Fatalf("pod %s: entries %+v, want one like %+v", pod, es, want)
			}
		}
	}
	return got
}

// checkTraffic sends HTTP and a UDP echo to the Pod through its entries of
// the family: from the test namespace, from the other node, from the node
// itself and from each hairpin Pod (on the same node).
func (e *env) checkTraffic(t *testing.T, ns, pod string, entries map[string]contract.Entry, f contract.Family, other *cluster.Node, hairpin ...string) {
	t.Helper()
	n := e.c.Node(e.nodeOf(t, ns, pod))
	tcp, udp := entries["tcp/"+string(f)], entries["udp/"+string(f)]
	tcpAddr, udpAddr := addr(tcp.NodeIP, tcp.NodePort), addr(udp.NodeIP, udp.NodePort)
	both := func() error {
		if err := expectBody(stack.HTTPGet(tcpAddr))(pod); err != nil {
			return fmt.Errorf("TCP %s: %w", tcpAddr, err)
		}
		reply, err := stack.UDPEcho(udpAddr, "ping")
		if err == nil && reply != pod+": ping" {
			err = fmt.Errorf("reply %q, want %q", reply, pod+": ping")
		}
		if err != nil {
			return fmt.Errorf("UDP %s: %w", udpAddr, err)
		}
		return nil
	}
	eventually(t, 10*time.Second, fmt.Sprintf("%s traffic from the test namespace to %s", f, pod), both)
	if err := other.Do(both); err != nil {
		t.Errorf("%s from node %s to %s: %v", f, other.Name, pod, err)
	}
	if err := n.Do(both); err != nil {
		t.Errorf("%s from node %s itself to %s: %v", f, n.Name, pod, err)
	}
	for _, from := range hairpin {
		if err := e.c.PodDo(ns, from, both); err != nil {
			t.Errorf("%s hairpin from pod %s to %s: %v", f, from, pod, err)
		}
	}
}

func (e *env) nodeOf(t *testing.T, ns, pod string) string {
	t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Spec.NodeName
}

// familyService is an opted-in Service with TCP 8080 and UDP 5353 of the
// given families (nil: RequireDualStack, IPv4 first).
func familyService(ns, name string, selector map[string]string, families ...corev1.IPFamily) *corev1.Service {
	s := npService(ns, name, selector,
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)})
	if len(families) == 0 {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	} else {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies = families
	}
	return s
}

func testDualStackAgent(t *testing.T, e *env) {
	ns := e.namespace(t)
	n0, n1 := e.node(node0), e.node(node1)
	v6only, dual := map[string]string{"app": "v6"}, map[string]string{"app": "dual"}
	// Two IPv6-only backends on node 0 (hairpin to itself and a neighbour),
	// dual-stack backends on both nodes.
	e.createPod(t, webPod(ns, "v6-a", node0, v6only))
	e.createPod(t, webPod(ns, "v6-b", node0, v6only))
	e.createPod(t, webPod(ns, "dual-a", node0, dual))
	e.createPod(t, webPod(ns, "dual-b", node1, dual))
	if _, err := e.c.WaitForPods(ctxFor(t, time.Minute), ns, nil, 4, true); err != nil {
		t.Fatal(err)
	}
	v6svc := e.createService(t, familyService(ns, "v6", v6only, corev1.IPv6Protocol))
	dualSvc := e.createService(t, familyService(ns, "dual", dual))
	if !slices.Equal(v6svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv6Protocol}) ||
		!slices.Equal(dualSvc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) {
		t.Fatalf("service families: v6 %v, dual %v", v6svc.Spec.IPFamilies, dualSvc.Spec.IPFamilies)
	}

	type backend struct {
		pod      string
		node     *cluster.Node
		families []contract.Family
		hairpin  []string
	}
	backends := []backend{
		{"v6-a", n0, []contract.Family{contract.FamilyIPv6}, []string{"v6-a", "v6-b"}},
		{"v6-b", n0, []contract.Family{contract.FamilyIPv6}, []string{"v6-b", "dual-a"}},
		{"dual-a", n0, []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6}, []string{"dual-a", "v6-a"}},
		{"dual-b", n1, []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6}, []string{"dual-b"}},
	}
	entries := map[string]map[string]contract.Entry{}
	for _, b := range backends {
		es := e.waitFamilyEntries(t, ns, b.pod, b.node, b.families...)
		entries[b.pod] = es
		other := n1
		if b.node == n1 {
			other = n0
		}
		for _, f := range []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6} {
			podIP := e.podIPOf(t, ns, b.pod, f)
			served := slices.Contains(b.families, f)
			for _, p := range []struct {
				proto   contract.Protocol
				podPort uint16
			}{{contract.ProtocolTCP, 8080}, {contract.ProtocolUDP, 5353}} {
				x := es[string(p.proto)+"/"+string(f)]
				if !served {
					// An IPv6-only Service opens nothing on IPv4.
					if e.hasRuleOf(t, b.node, f, p.proto, 0, netip.AddrPortFrom(podIP, p.podPort)) {
						t.Errorf("%s: a %s rule leads to %s though its Service is IPv6-only", b.pod, f, podIP)
					}
					continue
				}
				if !e.hasRuleOf(t, b.node, f, p.proto, x.NodePort, netip.AddrPortFrom(podIP, p.podPort)) ||
					!portHeldOf(t, b.node, f, p.proto, x.NodePort) {
					t.Errorf("%s: %s %s rule or socket missing for node port %d\n%s", b.pod, f, p.proto, x.NodePort, e.dp.dump(t, b.node, f))
				}
			}
			if served {
				e.checkTraffic(t, ns, b.pod, es, f, other, b.hairpin...)
			}
		}
	}

	// A restart of node 0's agent restores every family's mappings from the
	// annotations: no entry changes, the IPv6 rules and sockets are back and
	// carry traffic.
	a := e.agent(node0)
	if err := a.Stop(); err != nil {
		t.Fatalf("stop %s: %v", a.Name, err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", a.Name, err)
	}
	if err := a.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		if b.node != n0 {
			continue
		}
		after := e.waitFamilyEntries(t, ns, b.pod, b.node, b.families...)
		if !maps.Equal(after, entries[b.pod]) {
			t.Errorf("%s: entries changed across the agent restart: %v -> %v", b.pod, entries[b.pod], after)
		}
		x := after["tcp/"+string(contract.FamilyIPv6)]
		target := netip.AddrPortFrom(e.podIPOf(t, ns, b.pod, contract.FamilyIPv6), 8080)
		if !e.hasRuleOf(t, n0, contract.FamilyIPv6, contract.ProtocolTCP, x.NodePort, target) ||
			!portHeldOf(t, n0, contract.FamilyIPv6, contract.ProtocolTCP, x.NodePort) {
			t.Errorf("%s: IPv6 rule or socket of %d missing after the restart", b.pod, x.NodePort)
		}
		if err := expectBody(stack.HTTPGet(addr(x.NodeIP, x.NodePort)))(b.pod); err != nil {
			t.Errorf("%s: IPv6 traffic after the restart: %v", b.pod, err)
		}
	}

	// Removing a Service removes its Pods' rules, sockets, annotation and
	// UDP conntrack entries in every family.
	udpFlows := func(n *cluster.Node, f contract.Family, port int) string {
		out, _ := n.Command(context.Background(), "conntrack", "-L", "-f", strings.ToLower(string(f)), "-p", "udp",
			"--orig-port-dst", strconv.Itoa(port)).CombinedOutput()
		return string(out)
	}
	for _, b := range backends {
		for _, f := range b.families {
			x := entries[b.pod]["udp/"+string(f)]
			if !strings.Contains(udpFlows(b.node, f, x.NodePort), fmt.Sprintf("dport=%d ", x.NodePort)) {
				t.Errorf("%s: no %s conntrack entry for the UDP flow to %d:\n%s", b.pod, f, x.NodePort, udpFlows(b.node, f, x.NodePort))
			}
		}
	}
	for _, s := range []struct {
		name string
		pods []string
	}{{"dual", []string{"dual-a", "dual-b"}}, {"v6", []string{"v6-a", "v6-b"}}} {
		if err := e.client.CoreV1().Services(ns).Delete(context.Background(), s.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, pod := range s.pods {
			e.waitNoAnnotation(t, ns, pod)
			n := e.c.Node(e.nodeOf(t, ns, pod))
			for key, x := range entries[pod] {
				f := x.IPFamily
				podIP := e.podIPOf(t, ns, pod, f)
				waitFor(t, 10*time.Second, fmt.Sprintf("%s: %s rule and socket of %d released", pod, key, x.NodePort), func() (bool, error) {
					if target := netip.AddrPortFrom(podIP, uint16(x.PodPort)); e.hasRuleOf(t, n, f, x.Protocol, 0, target) {
						return false, fmt.Errorf("a rule still leads to %s:\n%s", target, e.dp.dump(t, n, f))
					}
					if portHeldOf(t, n, f, x.Protocol, x.NodePort) {
						return false, fmt.Errorf("port %d still held", x.NodePort)
					}
					if flows := udpFlows(n, f, x.NodePort); x.Protocol == contract.ProtocolUDP && strings.Contains(flows, fmt.Sprintf("dport=%d ", x.NodePort)) {
						return false, fmt.Errorf("UDP conntrack entries of %d not flushed:\n%s", x.NodePort, flows)
					}
					return true, nil
				})
			}
		}
	}
}

// testDualStackUpgrade: a Service created without a family policy is
// IPv4-only on a dual-stack cluster (IPv4 is the primary family), so its Pod
// gets IPv4 entries only; upgrading it to PreferDualStack adds the IPv6
// entries, which carry traffic, and going back to SingleStack removes them
// and their rules.
func testDualStackUpgrade(t *testing.T, e *env) {
	ns := e.namespace(t)
	n1 := e.node(node1)
	sel := map[string]string{"app": "up"}
	e.createPod(t, webPod(ns, "up", node1, sel))
	svc := familyService(ns, "up", sel)
	svc.Spec.IPFamilyPolicy = nil
	if got := e.createService(t, svc); !slices.Equal(got.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
		t.Fatalf("a Service without a family policy got ipFamilies %v, want [IPv4]", got.Spec.IPFamilies)
	}
	e.waitFamilyEntries(t, ns, "up", n1, contract.FamilyIPv4)

	e.updateService(t, ns, "up", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	entries := e.waitFamilyEntries(t, ns, "up", n1, contract.FamilyIPv4, contract.FamilyIPv6)
	e.checkTraffic(t, ns, "up", entries, contract.FamilyIPv6, e.node(node0))

	e.updateService(t, ns, "up", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies, s.Spec.ClusterIPs = s.Spec.IPFamilies[:1], s.Spec.ClusterIPs[:1]
	})
	e.waitFamilyEntries(t, ns, "up", n1, contract.FamilyIPv4)
	target := netip.AddrPortFrom(e.podIPOf(t, ns, "up", contract.FamilyIPv6), 8080)
	waitFor(t, 10*time.Second, "the IPv6 rule of the downgraded Service removed", func() (bool, error) {
		return !e.hasRuleOf(t, n1, contract.FamilyIPv6, contract.ProtocolTCP, 0, target), nil
	})
}

func testDualStackLBSync(t *testing.T, e *env) {
	ns := e.namespace(t)
	if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), deployment(ns, "web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{"app": "web"}
	for _, tc := range []struct {
		provider string
		family   contract.Family
		vips     netip.Prefix
	}{
		{"mock", contract.FamilyIPv6, netip.MustParsePrefix("fd00:198:200::/120")},
		{"mock", contract.FamilyIPv4, netip.MustParsePrefix("198.18.120.0/28")},
		{"avi", contract.FamilyIPv6, netip.MustParsePrefix("fd00:198:201::/120")},
		{"bigip", contract.FamilyIPv6, netip.MustParsePrefix("fd00:198:202::/120")},
	} {
		t.Run(tc.provider+"/"+string(tc.family), func(t *testing.T) {
			id := tc.provider + "-" + strings.ToLower(string(tc.family))
			class, clusterName, name := "npl.io/"+id, "dual-"+id, "web-"+id
			l, backend := e.startLBSync(t, "npl-lbsync-"+id, tc.provider, tc.vips,
				fmt.Sprintf("clusterName: %s\nloadBalancerClass: %s\nipFamily: %s\nresyncPeriod: 1m\ndrainSeconds: 0\n", clusterName, class, tc.family))
			e.createService(t, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: corev1.ServiceSpec{
					Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: sel,
					IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
					Ports:          []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
				},
			})

			// The members are the ready Pods' entries of the family.
			var want []lbmodel.Member
			owner := map[string]string{}
			waitFor(t, 60*time.Second, "2 ready Pods with an entry of each family", func() (bool, error) {
				pods, err := e.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
				if err != nil {
					return false, err
				}
				want, owner = nil, map[string]string{}
				for _, p := range pods.Items {
					es, err := contract.Parse(p.Annotations[contract.PodKey])
					if err != nil || !podutils.IsPodReady(&p) || len(es) != 2 {
						return false, nil
					}
					for _, x := range es {
						if x.IPFamily == tc.family {
							want = append(want, lbmodel.Member{IP: x.NodeIP, Port: int32(x.NodePort), Enabled: true})
							owner[addr(x.NodeIP, x.NodePort)] = p.Name
						}
					}
				}
				return len(pods.Items) == 2 && len(want) == 2, nil
			})
			lbName := lbmodel.LoadBalancerName(clusterName, ns, name)
			pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)
			var got map[string][]lbmodel.Member
			var vips []string
			waitFor(t, 30*time.Second, "the pool with the Pods' "+string(tc.family)+" members", func() (bool, error) {
				var ok bool
				var err error
				got, vips, ok, err = backend.Pools(lbName)
				if err == nil && !sameMembers(got[pool], want) {
					err = fmt.Errorf("pool %s has %v, want %v", pool, got[pool], want)
				}
				return ok && err == nil, err
			})
			for _, m := range got[pool] {
				ip := netip.MustParseAddr(m.IP)
				if contract.FamilyOf(ip) != tc.family {
					t.Errorf("member %s is not %s", m.IP, tc.family)
				}
				target := addr(m.IP, int(m.Port))
				if body, err := stack.HTTPGet(target); err != nil || body != owner[target] {
					t.Errorf("member %s answered %q (%v), want Pod %s", target, body, err, owner[target])
				}
			}
			// nplctl expects the same members and prints them as addresses.
			out, stderr, code := nplctl(t, "pools", "--kubeconfig", e.c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check", "-o", "wide")
			if code != 0 {
				t.Errorf("nplctl pools --check: exit %d, want 0 (in sync)\n%s%s", code, out, stderr)
			}
			for _, m := range want {
				if a := (inspect.Member{IP: m.IP, Port: m.Port}).Address(); !strings.Contains(out, a) {
					t.Errorf("nplctl pools -o wide does not show member %s:\n%s", a, out)
				}
			}
			waitFor(t, 20*time.Second, "the "+string(tc.family)+" VIP in the Service status", func() (bool, error) {
				in := e.service(t, ns, name).Status.LoadBalancer.Ingress
				if len(vips) != 1 || len(in) != 1 || in[0].IP != vips[0] {
					return false, fmt.Errorf("VIPs %v, status %+v", vips, in)
				}
				vip, err := netip.ParseAddr(vips[0])
				return err == nil && tc.vips.Contains(vip), err
			})
		})
	}
}
