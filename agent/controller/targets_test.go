package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
)

func svc(name string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Annotations: map[string]string{"nodeportlocal.antrea.io/enabled": "true"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func pod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", Labels: map[string]string{"app": "web", "tier": "front"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.0.5", PodIPs: []corev1.PodIP{{IP: "198.19.0.5"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

var v4 = []contract.Family{"IPv4"}

// handSlice is a hand-written EndpointSlice of Service svc naming Pods.
func handSlice(svc string, pods ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: svc + "-1", Namespace: "default",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.19.0.5"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: p}})
	}
	return s
}

func noSelector(s *corev1.Service) { s.Spec.Selector = nil }

func tcp(port int32) Target { return Target{PodPort: port, Protocol: "tcp", Family: "IPv4"} }
func udp(port int32) Target { return Target{PodPort: port, Protocol: "udp", Family: "IPv4"} }

func TestTargets(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	cases := []struct {
		name      string
		pod       *corev1.Pod
		services  []*corev1.Service
		slices    []*discoveryv1.EndpointSlice
		families  []contract.Family
		want      []Target
		wantSkips int
	}{
		{name: "one port", pod: pod(), services: []*corev1.Service{svc("a")}, families: v4, want: []Target{tcp(8080)}},
		{name: "annotation false", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Annotations["nodeportlocal.antrea.io/enabled"] = "false" })}, families: v4},
		{name: "annotation True is not true", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Annotations["nodeportlocal.antrea.io/enabled"] = "True" })}, families: v4},
		{name: "NodePort type does not count", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })}, families: v4},
		{name: "LoadBalancer type counts", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })}, families: v4, want: []Target{tcp(8080)}},
		{name: "empty selector does not count", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Selector = nil })}, families: v4},
		{name: "no selector: a targetRef of its EndpointSlice chooses the Pod", pod: pod(), families: v4, want: []Target{tcp(8080)},
			services: []*corev1.Service{svc("a", noSelector)}, slices: []*discoveryv1.EndpointSlice{handSlice("a", "other", "web-1")}},
		{name: "no selector: a slice of another Service chooses nothing", pod: pod(), families: v4,
			services: []*corev1.Service{svc("a", noSelector)}, slices: []*discoveryv1.EndpointSlice{handSlice("b", "web-1")}},
		{name: "no selector: a slice naming other Pods", pod: pod(), families: v4,
			services: []*corev1.Service{svc("a", noSelector)}, slices: []*discoveryv1.EndpointSlice{handSlice("a", "web-2")}},
		{name: "a selector ignores slices", pod: pod(), families: v4,
			services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "db"} })},
			slices:   []*discoveryv1.EndpointSlice{handSlice("a", "web-1")}},
		{name: "selector must fully match", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Selector["tier"] = "back" })}, families: v4},
		{name: "other namespace", pod: pod(), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Namespace = "other" })}, families: v4},
		{name: "two services one pod", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a"), svc("b", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(9090) }),
		}, want: []Target{tcp(8080), tcp(9090)}},
		{name: "same targetPort twice gives one target", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a"), svc("b", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }),
		}, want: []Target{tcp(8080)}},
		{name: "named targetPort", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") }),
		}, want: []Target{tcp(8080)}},
		{name: "named targetPort must match protocol", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a", func(s *corev1.Service) {
				s.Spec.Ports[0].TargetPort = intstr.FromString("dns")
			}),
		}, wantSkips: 1},
		{name: "unknown named port skipped", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("nope") }),
		}, wantSkips: 1},
		{name: "sidecar named port", families: v4, pod: pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}}}}
		}), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("proxy") })}, want: []Target{tcp(15001)}},
		{name: "plain init container ports are not resolved", families: v4, pod: pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Ports: []corev1.ContainerPort{{Name: "init", ContainerPort: 15001}}}}
		}), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("init") })}, wantSkips: 1},
		{name: "tcp and udp on one port are separate", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a", func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "t", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(5353)},
					{Name: "u", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)},
				}
			}),
		}, want: []Target{tcp(5353), udp(5353)}},
		{name: "sctp skipped", pod: pod(), families: v4, services: []*corev1.Service{
			svc("a", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolSCTP }),
		}, wantSkips: 1},
		{name: "hostPort shortcut", families: v4, pod: pod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 18080 }),
			services: []*corev1.Service{svc("a")}, want: []Target{{PodPort: 8080, Protocol: "tcp", Family: "IPv4", HostPort: 18080}}},
		{name: "hostPort of the other protocol is ignored", families: v4, pod: pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 8080, Protocol: corev1.ProtocolUDP, HostPort: 18080})
		}), services: []*corev1.Service{svc("a")}, want: []Target{tcp(8080)}},
		{name: "no pod IP", pod: pod(func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }), services: []*corev1.Service{svc("a")}, families: v4},
		{name: "succeeded pod", pod: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), services: []*corev1.Service{svc("a")}, families: v4},
		{name: "host network pod", pod: pod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), services: []*corev1.Service{svc("a")}, families: v4},
		{name: "dual stack", families: []contract.Family{"IPv4", "IPv6"}, pod: pod(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "198.19.0.5"}, {IP: "fd00::5"}}
		}), services: []*corev1.Service{svc("a")}, want: []Target{tcp(8080), {PodPort: 8080, Protocol: "tcp", Family: "IPv6"}}},
		{name: "IPv6-only service on a dual-stack pod", families: []contract.Family{"IPv4", "IPv6"}, pod: pod(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "198.19.0.5"}, {IP: "fd00::5"}}
		}), services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })},
			want: []Target{{PodPort: 8080, Protocol: "tcp", Family: "IPv6"}}},
		{name: "IPv4-only and dual-stack services on one pod port", families: []contract.Family{"IPv4", "IPv6"}, pod: pod(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "198.19.0.5"}, {IP: "fd00::5"}}
		}), services: []*corev1.Service{
			svc("a", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol} }),
			svc("b", func(s *corev1.Service) {
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
				s.Spec.Ports[0].TargetPort = intstr.FromInt32(5353)
				s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
			}),
		}, want: []Target{tcp(8080), udp(5353), {PodPort: 5353, Protocol: "udp", Family: "IPv6"}}},
		{name: "IPv6-only service on an IPv4-only pod", families: v4, pod: pod(),
			services: []*corev1.Service{svc("a", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })}},
		{name: "IPv6 pod on an IPv4-only node", families: v4, pod: pod(func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.PodIPs = "fd00::5", []corev1.PodIP{{IP: "fd00::5"}}
		}), services: []*corev1.Service{svc("a")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, skips := Targets(tc.pod, tc.services, tc.slices, tc.families)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Targets (-want +got):\n%s", diff)
			}
			if len(skips) != tc.wantSkips {
				t.Errorf("skips = %d (%v), want %d", len(skips), skips, tc.wantSkips)
			}
		})
	}
}

func TestNodeIPs_followsPreference(t *testing.T) {
	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"},
		{Type: corev1.NodeExternalIP, Address: "10.10.10.10"},
		{Type: corev1.NodeInternalIP, Address: "fd12:3456:789a:1::1"},
		{Type: corev1.NodeHostName, Address: "node-a"},
	}}}
	internal, _ := ParseNodeIPPreference("InternalIP,ExternalIP")
	external, _ := ParseNodeIPPreference("ExternalIP,InternalIP")
	got := NodeIPs(node, internal)
	if got["IPv4"].String() != "10.0.0.1" || got["IPv6"].String() != "fd12:3456:789a:1::1" {
		t.Errorf("InternalIP first: %v", got)
	}
	got = NodeIPs(node, external)
	if got["IPv4"].String() != "10.10.10.10" || got["IPv6"].String() != "fd12:3456:789a:1::1" {
		t.Errorf("ExternalIP first: %v", got)
	}
	if _, err := ParseNodeIPPreference("Hostname"); err == nil {
		t.Error("ParseNodeIPPreference(Hostname) accepted")
	}
}
