package builder

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// Fixtures: a Service shop/web of cluster c1 selecting app=web, and Pods and
// Nodes built from small modifiers, so each test case states only what
// matters to it.

const (
	testCluster = "c1"
	testNS      = "shop"
	testLB      = "c1--shop_web"
)

func service(ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    ports,
		},
	}
}

func svcWith(svc *corev1.Service, mods ...func(*corev1.Service)) *corev1.Service {
	for _, m := range mods {
		m(svc)
	}
	return svc
}

// port is a Service port; target is an int (numeric) or a string (named).
func port(proto corev1.Protocol, p int32, target any) corev1.ServicePort {
	sp := corev1.ServicePort{Name: fmt.Sprintf("%s-%d", strings.ToLower(string(proto)), p), Protocol: proto, Port: p}
	switch t := target.(type) {
	case int:
		sp.TargetPort = intstr.FromInt32(int32(t))
	case string:
		sp.TargetPort = intstr.FromString(t)
	}
	return sp
}

func withNodePort(sp corev1.ServicePort, np int32) corev1.ServicePort {
	sp.NodePort = np
	return sp
}

type podMod func(*corev1.Pod)

// pod is a Running, Ready Pod of shop selected by web, with a container port
// named http (8080/TCP), on node n1 with IP 198.19.1.<i>.
func pod(name string, mods ...podMod) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "web", "pod": name}},
		Spec: corev1.PodSpec{
			NodeName: "n1",
			Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			}}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      "198.19.1.10",
			PodIPs:     []corev1.PodIP{{IP: "198.19.1.10"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// npl sets the NodePortLocal annotation to entries joined into a JSON array.
func npl(entries ...string) podMod {
	return func(p *corev1.Pod) { setAnnotation(p, "["+strings.Join(entries, ",")+"]") }
}

func rawNPL(value string) podMod {
	return func(p *corev1.Pod) { setAnnotation(p, value) }
}

func setAnnotation(p *corev1.Pod, value string) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[contract.PodKey] = value
}

// entry is one annotation entry as npl-agent writes it.
func entry(podPort int, nodeIP string, nodePort int, proto string) string {
	family := contract.FamilyIPv4
	if strings.Contains(nodeIP, ":") {
		family = contract.FamilyIPv6
	}
	return fmt.Sprintf(`{"podPort":%d,"nodeIP":%q,"nodePort":%d,"protocol":%q,"ipFamily":%q}`,
		podPort, nodeIP, nodePort, proto, family)
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
}

func terminating(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }

func inNamespace(ns string) podMod { return func(p *corev1.Pod) { p.Namespace = ns } }

func phase(ph corev1.PodPhase) podMod { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func labels(l map[string]string) podMod { return func(p *corev1.Pod) { p.Labels = l } }

func onNode(n string) podMod { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func podIPs(ips ...string) podMod {
	return func(p *corev1.Pod) {
		p.Status.PodIP = ips[0]
		p.Status.PodIPs = nil
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
}

func containerPorts(ports ...corev1.ContainerPort) podMod {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ports }
}

type nodeMod func(*corev1.Node)

// node is a Ready, schedulable Node with the given InternalIPs.
func node(name string, ips ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return n
}

func nodeWith(n *corev1.Node, mods ...nodeMod) *corev1.Node {
	for _, m := range mods {
		m(n)
	}
	return n
}

func ptr[T any](v T) *T { return &v }

// listener is the expected listener of a port with its members.
func listener(proto lbmodel.Protocol, p int32, members ...lbmodel.Member) lbmodel.Listener {
	if members == nil {
		members = []lbmodel.Member{}
	}
	return lbmodel.Listener{Port: p, Protocol: proto,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(testLB, proto, p), Members: members}}
}

func up(ip string, p int32) lbmodel.Member { return lbmodel.Member{IP: ip, Port: p, Enabled: true} }

func drain(ip string, p int32) lbmodel.Member { return lbmodel.Member{IP: ip, Port: p} }

// handSlice is a hand-written EndpointSlice of Service svc of shop whose
// endpoints name pods by targetRef.
func handSlice(svc string, pods ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: svc + "-manual",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.19.1.10"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: p}})
	}
	return s
}
