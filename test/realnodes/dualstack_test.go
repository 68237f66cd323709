package realnodes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// dualReplicas is how many Pods the dual-stack Service selects.
const dualReplicas = 2

// dualStackService: on the dual-stack real nodes (each kubelet with an
// IPv4 and an IPv6 node IP and Pod CIDR, the CNI bridge with a host-local
// range of each, kube-proxy serving both families), a Service that
// requires both families (opted in to NodePortLocal) selects Pods with an
// address of each; the agent gives each Pod one annotation entry per
// family, the IPv6 one on its node's IPv6 address, and requests over IPv6
// from outside the nodes to each IPv6 member reach its Pod, as the IPv4
// ones do. kube-proxy serves the Service's IPv6 ClusterIP from the nodes,
// and every node of a Pod holds npl's IPv6 rules (ip6tables, or the ip6
// table): helm uninstall must take them away too.
func (s *story) dualStackService(t *testing.T) {
	ctx := s.ctx
	d := workloadDeployment(workloadNS, "dual", s.tag)
	d.Spec.Replicas = ptr.To[int32](dualReplicas)
	if _, err := s.client.AppsV1().Deployments(workloadNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := s.client.CoreV1().Services(workloadNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dual", Namespace: workloadNS, Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Selector:       map[string]string{"app": "dual"},
			Ports:          []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("the dual-stack Service's ClusterIPs %v; want one per family", svc.Spec.ClusterIPs)
	}

	// members: node address and port of each entry -> namespace/name.
	members := map[string]string{}
	nodesOfPods := map[string]bool{}
	eventually(t, ctx, fmt.Sprintf("%d ready dual Pods, each with an IPv4 and an IPv6 address and an entry per family", dualReplicas), func(ctx context.Context) error {
		pods, err := s.client.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "app=dual"})
		if err != nil {
			return err
		}
		got, nodes := map[string]string{}, map[string]bool{}
		for _, p := range pods.Items {
			if !podutils.IsPodReady(&p) || p.DeletionTimestamp != nil {
				continue
			}
			if err := checkDualStackPod(s.c, &p); err != nil {
				return err
			}
			entries, _ := contract.Parse(p.Annotations[contract.PodKey])
			for _, e := range entries {
				got[net.JoinHostPort(e.NodeIP, strconv.Itoa(e.NodePort))] = p.Namespace + "/" + p.Name
			}
			nodes[p.Spec.NodeName] = true
		}
		if len(got) != 2*dualReplicas {
			return fmt.Errorf("%d entries of ready Pods; want %d", len(got), 2*dualReplicas)
		}
		members, nodesOfPods = got, nodes
		return nil
	})
	for addr, pod := range members {
		if got, err := get(ctx, addr); err != nil || got != pod {
			t.Errorf("GET %s from outside the nodes: %s (%v); want %s", addr, got, err, pod)
		}
	}
	t.Logf("IPv4 and IPv6 members, each answered by its Pod: %v", members)

	// kube-proxy's IPv6 side: the Service's IPv6 ClusterIP from a node.
	clusterIPv6 := svc.Spec.ClusterIPs[1]
	node := s.c.Nodes()[0]
	var answer string
	eventually(t, ctx, "kube-proxy serves the IPv6 ClusterIP "+clusterIPv6+" on "+node.Name, func(ctx context.Context) error {
		return node.Do(func() error {
			var err error
			answer, err = getHere(ctx, net.JoinHostPort(clusterIPv6, "80"))
			return err
		})
	})
	if !strings.HasPrefix(answer, workloadNS+"/dual-") {
		t.Errorf("the IPv6 ClusterIP %s answered by %q; want a dual Pod", clusterIPv6, answer)
	}

	for _, n := range s.c.Nodes() {
		if !nodesOfPods[n.Name] {
			continue
		}
		r, err := readRules(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if v6 := r.nplIPv6(); v6 == "" {
			t.Errorf("%s runs a dual Pod but holds no IPv6 rule of npl's:\n%s", n.Name, r.npl())
		}
	}
}

// checkDualStackPod checks that the Pod p has an address of each family
// and exactly one annotation entry per family for its port 8080: the IPv4
// one on its node's IPv4 address, the IPv6 one on its node's IPv6 address.
func checkDualStackPod(c *cluster.Cluster, p *corev1.Pod) error {
	if len(p.Status.PodIPs) != 2 {
		return fmt.Errorf("pod %s: podIPs %v; want one per family", p.Name, p.Status.PodIPs)
	}
	n := c.Node(p.Spec.NodeName)
	if n == nil {
		return fmt.Errorf("pod %s: no node %q", p.Name, p.Spec.NodeName)
	}
	entries, err := contract.Parse(p.Annotations[contract.PodKey])
	if err != nil || len(entries) != 2 {
		return fmt.Errorf("pod %s: annotation %q (%v); want an entry per family", p.Name, p.Annotations[contract.PodKey], err)
	}
	want := map[contract.Family]string{contract.FamilyIPv4: n.IP.String(), contract.FamilyIPv6: n.IPv6.String()}
	for _, e := range entries {
		if e.NodeIP != want[e.IPFamily] || e.PodPort != 8080 || e.Protocol != contract.ProtocolTCP {
			return fmt.Errorf("pod %s on %s: entry %+v; want %s's %s address %s, port 8080/TCP", p.Name, n.Name, e, n.Name, e.IPFamily, want[e.IPFamily])
		}
		delete(want, e.IPFamily)
	}
	if len(want) > 0 {
		return fmt.Errorf("pod %s: no entry of %v in %q", p.Name, want, p.Annotations[contract.PodKey])
	}
	return nil
}

// getHere is get with a connection opened on the calling thread (which
// Node.Do puts in a node's network namespace): no keep-alive, no other
// goroutine dials.
func getHere(ctx context.Context, addr string) (string, error) {
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }, DisableKeepAlives: true}}
	return getWith(ctx, client, addr)
}
