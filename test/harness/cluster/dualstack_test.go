package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestCluster_dualStack: with DualStack, Nodes carry an InternalIP and a Pod
// CIDR of each family, Pods get an address of each (inside their node's Pod
// CIDRs), their servers answer over both families from the test namespace,
// from another node and from a Pod on another node, IPv6-only and dual-stack
// Services get ClusterIPs and EndpointSlices of their families, the
// kube-proxy stand-in serves a dual-stack NodePort Service on both addresses
// of every node, and Close leaves nothing behind.
func TestCluster_dualStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 2, DualStack: true, KubeProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	t.Logf("dual-stack cluster started in %v", c.StartDuration())
	if !c.DualStack() {
		t.Errorf("DualStack() = false on a dual-stack cluster")
	}

	for i, n := range c.Nodes() {
		wantIPs := []string{fmt.Sprintf("198.18.0.%d", 10+i), fmt.Sprintf("fd00:198:18::%d", 10+i)}
		wantCIDRs := []string{fmt.Sprintf("198.19.%d.0/24", i), netip.MustParsePrefix(fmt.Sprintf("fd00:198:19:%d::/64", i)).String()}
		obj, err := c.Client().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var internal []string
		for _, a := range obj.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if !slices.Equal(internal, wantIPs) || !slices.Equal(obj.Spec.PodCIDRs, wantCIDRs) {
			t.Errorf("node %s: InternalIPs %v, podCIDRs %v; want %v and %v", n.Name, internal, obj.Spec.PodCIDRs, wantIPs, wantCIDRs)
		}
		if got := fmt.Sprint(n.IPs()); got != fmt.Sprint(wantIPs) {
			t.Errorf("node %s: IPs() = %s, want %v", n.Name, got, wantIPs)
		}
	}

	ns := newNamespace(ctx, t, c, "dual")
	sel := map[string]string{"app": "echo"}
	for i, n := range c.Nodes() {
		p := echoPod(ns, fmt.Sprintf("echo-%d", i))
		p.Labels, p.Spec.NodeName = sel, n.Name
		createPod(ctx, t, c, p)
	}
	pods, err := c.WaitForPods(ctx, ns, labels.SelectorFromSet(sel), 2, true)
	if err != nil {
		t.Fatal(err)
	}
	ipsOf := map[string][]netip.Addr{}
	for _, p := range pods {
		n := c.Node(p.Spec.NodeName)
		if len(p.Status.PodIPs) != 2 || len(p.Status.HostIPs) != 2 {
			t.Fatalf("pod %s: podIPs %v, hostIPs %v; want one of each family", p.Name, p.Status.PodIPs, p.Status.HostIPs)
		}
		v4, v6 := netip.MustParseAddr(p.Status.PodIPs[0].IP), netip.MustParseAddr(p.Status.PodIPs[1].IP)
		if p.Status.PodIP != v4.String() || !n.PodCIDR.Contains(v4) || !n.PodCIDRv6.Contains(v6) {
			t.Errorf("pod %s: podIP %s, podIPs %v; want IPv4 first, in %s and %s", p.Name, p.Status.PodIP, p.Status.PodIPs, n.PodCIDR, n.PodCIDRv6)
		}
		if p.Status.HostIPs[0].IP != n.IP.String() || p.Status.HostIPs[1].IP != n.IPv6.String() {
			t.Errorf("pod %s: hostIPs %v, want %v", p.Name, p.Status.HostIPs, n.IPs())
		}
		ipsOf[p.Name] = []netip.Addr{v4, v6}
	}

	// Every Pod over both families: from the test namespace, from the other
	// node, and from the Pod on the other node (across the test namespace's
	// routes).
	for i, p := range pods {
		other := pods[(i+1)%len(pods)]
		otherNode := c.Node(other.Spec.NodeName)
		for _, ip := range ipsOf[p.Name] {
			http, udp := netip.AddrPortFrom(ip, 8080).String(), netip.AddrPortFrom(ip, 5353).String()
			for _, from := range []struct {
				name string
				do   func(func() error) error
			}{
				{"the test namespace", func(f func() error) error { return f() }},
				{"node " + otherNode.Name, otherNode.Do},
				{"pod " + other.Name, func(f func() error) error { return c.PodDo(ns, other.Name, f) }},
			} {
				var body, echo string
				err := from.do(func() error {
					var err error
					if body, err = stack.HTTPGet(http); err != nil {
						return err
					}
					echo, err = stack.UDPEcho(udp, "ping")
					return err
				})
				if err != nil || body != p.Name || echo != p.Name+": ping" {
					t.Errorf("from %s to pod %s at %s: HTTP %q, UDP %q, err %v; want %q and %q",
						from.name, p.Name, ip, body, echo, err, p.Name, p.Name+": ping")
				}
			}
		}
	}

	// Services of either family, and of both.
	for _, tc := range []struct {
		name     string
		policy   corev1.IPFamilyPolicy
		families []corev1.IPFamily
	}{
		{"v6only", corev1.IPFamilyPolicySingleStack, []corev1.IPFamily{corev1.IPv6Protocol}},
		{"dual", corev1.IPFamilyPolicyRequireDualStack, nil},
	} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: sel, IPFamilyPolicy: ptr.To(tc.policy), IPFamilies: tc.families,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		got, err := c.Client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service %s: %v", tc.name, err)
		}
		wantFamilies := tc.families
		if tc.policy == corev1.IPFamilyPolicyRequireDualStack {
			wantFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}
		if !slices.Equal(got.Spec.IPFamilies, wantFamilies) || len(got.Spec.ClusterIPs) != len(wantFamilies) {
			t.Errorf("service %s: ipFamilies %v, clusterIPs %v; want %v", tc.name, got.Spec.IPFamilies, got.Spec.ClusterIPs, wantFamilies)
		}
		for i, fam := range wantFamilies {
			ip, err := netip.ParseAddr(got.Spec.ClusterIPs[min(i, len(got.Spec.ClusterIPs)-1)])
			if err != nil || ip.Is6() != (fam == corev1.IPv6Protocol) {
				t.Errorf("service %s: clusterIPs %v do not match families %v", tc.name, got.Spec.ClusterIPs, wantFamilies)
			}
		}
		// The EndpointSlice controller lists each Pod address of each family.
		for _, fam := range wantFamilies {
			addressType := discoveryv1.AddressTypeIPv4
			idx := 0
			if fam == corev1.IPv6Protocol {
				addressType, idx = discoveryv1.AddressTypeIPv6, 1
			}
			var want []string
			for _, p := range pods {
				want = append(want, ipsOf[p.Name][idx].String())
			}
			slices.Sort(want)
			var last []string
			err := poll(ctx, func() bool {
				last = sliceAddresses(ctx, t, c, ns, tc.name, addressType)
				return slices.Equal(last, want)
			})
			if err != nil {
				t.Errorf("service %s: %s EndpointSlice addresses %v, want %v", tc.name, addressType, last, want)
			}
		}
	}

	// The kube-proxy stand-in: a dual-stack NodePort Service answers on
	// both addresses of every node, TCP and UDP, from one of its Pods.
	np := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: sel, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)},
			},
		},
	}
	np, err = c.Client().CoreV1().Services(ns).Create(ctx, np, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create NodePort service: %v", err)
	}
	httpPort, dnsPort := uint16(np.Spec.Ports[0].NodePort), uint16(np.Spec.Ports[1].NodePort)
	for _, n := range c.Nodes() {
		for _, ip := range n.IPs() {
			var body, echo string
			err := poll(ctx, func() bool {
				var err error
				body, err = stack.HTTPGet(netip.AddrPortFrom(ip, httpPort).String())
				if err != nil {
					return false
				}
				echo, err = stack.UDPEcho(netip.AddrPortFrom(ip, dnsPort).String(), "ping")
				return err == nil
			})
			if err != nil || !strings.HasPrefix(body, "echo-") || !strings.HasPrefix(echo, "echo-") || !strings.HasSuffix(echo, ": ping") {
				t.Errorf("NodePort service at %s: HTTP %q, UDP %q (%v); want answers from the echo Pods", ip, body, echo, err)
			}
		}
	}

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := netnsList(t); len(left) > 0 {
		t.Errorf("after Close, network namespaces remain: %v", left)
	}
	if links := linkNames(t); !slices.Equal(links, []string{"lo"}) {
		t.Errorf("after Close, the test namespace has devices %v, want only lo", links)
	}
	if out, err := runCmd(t, "ip", "-6", "route", "show"); err != nil || strings.Contains(out, "fd00:") {
		t.Errorf("after Close, IPv6 routes remain in the test namespace: %q (err %v)", out, err)
	}
}

// sliceAddresses lists the ready endpoint addresses of a Service's
// EndpointSlices of one address type, sorted.
func sliceAddresses(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, svc string, at discoveryv1.AddressType) []string {
	t.Helper()
	list, err := c.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc,
	})
	if err != nil {
		t.Fatalf("list EndpointSlices of %s: %v", svc, err)
	}
	var out []string
	for _, s := range list.Items {
		if s.AddressType != at {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return out
}

// poll calls cond every 100ms for up to 30s, until it returns true.
func poll(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
