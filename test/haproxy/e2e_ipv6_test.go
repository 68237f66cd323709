package haproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestEndToEnd_ipv6VIP: on a dual-stack cluster, npl-lbsync with
// ipFamily IPv6 and an IPv6 vipPool gives an IPv6-only LoadBalancer
// Service (TCP 80 and UDP 53) an IPv6 VIP on the edge, whose members are
// the Pods' IPv6 NodePortLocal mappings; requests over IPv6 from the client
// namespace to the VIP reach every ready Pod, and none fails, and so do UDP
// flows (through the edge's nftables table). With the edge host no longer
// forwarding IPv6, the UDP listener leaves the table and the Service is
// told why (NotServed), TCP still served; forwarding again, UDP is served
// again. The shared IPv4 cluster of the package is closed first (one
// bridge per process); the next test that asks for it starts it again.
func TestEndToEnd_ipv6VIP(t *testing.T) {
	stack.StopAgents(agents)
	agents = nil
	if err := cluster.CloseShared(); err != nil {
		t.Fatalf("close the shared cluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 3, DualStack: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close the dual-stack cluster: %v", err)
		}
	})
	ag, err := stack.StartAgents(ctx, c, stack.AgentOptions{})
	if err != nil {
		t.Fatalf("start agents: %v", err)
	}
	t.Cleanup(func() { stack.StopAgents(ag) })
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := edgebed.Start(ctx, t.TempDir(), edgebed.Options{
		Bridge: "npl-br0", BridgeIP: netip.MustParseAddr("198.18.0.1"),
		EdgeIP: netip.MustParseAddr("198.18.0.200"), ClientIP: netip.MustParseAddr("198.18.0.201"),
		BridgeIPv6: netip.MustParseAddr("fd00:198:18::1"),
		EdgeIPv6:   netip.MustParseAddr("fd00:198:18::200"), ClientIPv6: netip.MustParseAddr("fd00:198:18::201"),
		BinDir: bin, Name: "v6",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("npl-edge log:\n%s", tail(b.EdgeLog(), 40))
		}
		if err := b.Close(); err != nil {
			t.Errorf("close the bed: %v", err)
		}
	})
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	var section map[string]any
	if err := json.Unmarshal(b.ProviderSection("v6"), &section); err != nil {
		t.Fatal(err)
	}
	sec, _ := json.Marshal(map[string]any{"name": "haproxy", "haproxy": section})
	cfg := fmt.Sprintf("clusterName: v6\nloadBalancerClass: npl.io/v6\nipFamily: IPv6\nresyncPeriod: 1m\ndrainSeconds: 5\nvipPool: [%q]\nprovider: %s\n",
		edgebed.VIPRange6, sec)
	l, err := stack.StartLBSync(ctx, c, stack.LBSyncOptions{Name: "npl-lbsync-v6", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- npl-lbsync log tail:\n%s", l.Tail(40))
		}
		_ = l.Stop()
	})

	client := c.Client()
	ns := c.TestNamespace(t)
	d := webDeployment(ns, "web", 3)
	d.Spec.Template.Spec.Containers[0].Ports = append(d.Spec.Template.Spec.Containers[0].Ports,
		corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP})
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := lbService(ns, "web", "v6")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP})
	single := corev1.IPFamilyPolicySingleStack
	svc.Spec.IPFamilyPolicy, svc.Spec.IPFamilies = &single, []corev1.IPFamily{corev1.IPv6Protocol}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip, err := netip.ParseAddr(waitForVIP(t, client, ns, "web", 90*time.Second))
	if err != nil {
		t.Fatalf("the Service's VIP: %v", err)
	}
	if !edgebed.VIPRange6.Contains(vip) || vip == edgebed.VIPRange6.Masked().Addr() {
		t.Fatalf("VIP %s is not a usable address of %s (its first, the subnet-router anycast address, is not)", vip, edgebed.VIPRange6)
	}
	// The members HAProxy serves are the Pods' IPv6 mappings.
	p, err := b.OpenProviderPool(ctx, "v6", []netip.Prefix{edgebed.VIPRange6}, b.ProviderSection("v6"))
	if err != nil {
		t.Fatal(err)
	}
	name := lbmodel.LoadBalancerName("v6", ns, "web")
	waitForCond(t, 90*time.Second, "3 IPv6 members on each listener of the edge, one per Pod mapping", func() (bool, error) {
		lbs, err := p.List(ctx)
		if err != nil {
			return false, err
		}
		i := slices.IndexFunc(lbs, func(lb lbmodel.LoadBalancer) bool { return lb.Name == name })
		if i < 0 {
			return false, fmt.Errorf("the edge has no %s", name)
		}
		lb := lbs[i]
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		want := map[lbmodel.Protocol][]lbmodel.Member{}
		for _, pod := range pods.Items {
			es, err := contract.Parse(pod.Annotations[contract.PodKey])
			if err != nil {
				return false, err
			}
			for _, e := range es {
				if e.IPFamily == contract.FamilyIPv6 {
					p := lbmodel.Protocol(e.Protocol.Kubernetes())
					want[p] = append(want[p], lbmodel.Member{IP: e.NodeIP, Port: int32(e.NodePort), Enabled: true})
				}
			}
		}
		if len(lb.Listeners) != 2 || len(want[lbmodel.TCP]) != 3 || len(want[lbmodel.UDP]) != 3 {
			return false, fmt.Errorf("listeners %v, IPv6 mappings %v", lb.Listeners, want)
		}
		for _, l := range lb.Listeners {
			got := l.Pool.Members
			for _, m := range got {
				if !netip.MustParseAddr(m.IP).Is6() {
					return false, fmt.Errorf("member %s of %s/%d is not IPv6", m.IP, l.Protocol, l.Port)
				}
			}
			if !slices.Equal(lbmodel.SortMembers(got), lbmodel.SortMembers(want[l.Protocol])) {
				return false, fmt.Errorf("%s/%d members %v, want %v", l.Protocol, l.Port, got, want[l.Protocol])
			}
		}
		return true, nil
	})
	if lb := listOne(t, p, name); !slices.Equal(lb.VIPs, []string{vip.String()}) {
		t.Errorf("the edge serves VIPs %v, want [%s]", lb.VIPs, vip)
	}

	url := edgebed.URL(vip.String(), 80)
	pods := scaleAndConverge(t, client, b, ns, "web", url, 3)
	const n = 60
	got := answers(t, b, url, n)
	trimmed := map[string]int{}
	for k, v := range got {
		trimmed[strings.TrimSpace(k)] += v
	}
	if !slices.Equal(names(trimmed), pods) {
		t.Fatalf("%d requests to %s answered by %v, want every ready Pod %v", n, url, trimmed, pods)
	}
	t.Logf("%d requests over IPv6 to VIP %s: 0 failed, per Pod %v", n, vip, trimmed)

	// UDP over IPv6: new flows through the VIP reach every ready Pod.
	addr := net.JoinHostPort(vip.String(), "53")
	udpReaches := func(when string, want []string) {
		t.Helper()
		counts := udpFlowsReach(t, b, addr, 60, func() ([]string, error) { return want, nil })
		t.Logf("%s: 60 UDP flows over IPv6 to %s: %v", when, addr, counts)
	}
	udpReaches("served", pods)

	// The edge host stops forwarding IPv6: npl-edge's resync takes the UDP
	// listener out of its table, the next Ensure (a scale-down) says why,
	// and TCP is still served.
	forwarding := func(on string) {
		t.Helper()
		// Not ctx: the cleanup runs after it ends.
		if err := edgebed.Run(context.Background(), "ip", "netns", "exec", b.Edges[0].Netns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding="+on); err != nil {
			t.Fatal(err)
		}
	}
	forwarding("0")
	t.Cleanup(func() { forwarding("1") })
	pods = scaleAndConverge(t, client, b, ns, "web", url, 2)
	waitForCond(t, 30*time.Second, "a NotServed Event for UDP/53 naming IPv6 forwarding", func() (bool, error) {
		return hasEvent(ctx, client, ns, "web", "NotServed", "UDP/53: net.ipv6.conf.all.forwarding is 0")
	})
	udpListenerGone(t, b, addr, "the edge does not forward IPv6")
	answers(t, b, url, 10)

	// Forwarding again: the next resync serves the listener again.
	forwarding("1")
	udpReaches("forwarding again", pods)
}
