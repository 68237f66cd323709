package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

type buildCase struct {
	name          string
	mode          string
	family        string
	svc           *corev1.Service
	pods          []*corev1.Pod
	slices        []*discoveryv1.EndpointSlice
	nodes         []*corev1.Node
	wantListeners []lbmodel.Listener
	wantReport    Report
}

func runBuildCases(t *testing.T, tests []buildCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb, report := Build(Input{
				ClusterName:    testCluster,
				ServiceType:    tt.mode,
				Family:         tt.family,
				Service:        tt.svc,
				Pods:           tt.pods,
				EndpointSlices: tt.slices,
				Nodes:          tt.nodes,
			})
			if lb == nil {
				t.Fatalf("Build returned no model; report %+v", report)
			}
			want := &lbmodel.LoadBalancer{Name: testLB, Service: "shop/web", Listeners: tt.wantListeners}
			if want.Listeners == nil {
				want.Listeners = []lbmodel.Listener{}
			}
			if diff := cmp.Diff(want, lb); diff != "" {
				t.Errorf("model (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantReport, report, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

var (
	tcp8080 = port(corev1.ProtocolTCP, 80, 8080)
	udp53   = port(corev1.ProtocolUDP, 53, 5353)
)

func TestBuild_nodePortLocal(t *testing.T) {
	runBuildCases(t, []buildCase{
		{
			name: "each Ready Pod's entry for the targetPort is a member",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{
				pod("a", npl(entry(8080, "198.18.0.12", 61000, "tcp"))),
				pod("b", npl(entry(8080, "198.18.0.11", 61001, "tcp"))),
				pod("c", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80,
				up("198.18.0.11", 61000), up("198.18.0.11", 61001), up("198.18.0.12", 61000))},
			wantReport: Report{ReadyBackends: 3},
		},
		{
			name: "entries of other Pod ports are left out",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{pod("a", npl(
				entry(8080, "198.18.0.11", 61000, "tcp"),
				entry(9090, "198.18.0.11", 61001, "tcp"),
			))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "named targetPort resolves per Pod",
			svc:  service(port(corev1.ProtocolTCP, 80, "http")),
			pods: []*corev1.Pod{
				pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("b", containerPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9000}),
					npl(entry(8080, "198.18.0.12", 61000, "tcp"), entry(9000, "198.18.0.12", 61001, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80,
				up("198.18.0.11", 61000), up("198.18.0.12", 61001))},
			wantReport: Report{ReadyBackends: 2},
		},
		{
			name: "named targetPort of a sidecar init container resolves",
			svc:  service(port(corev1.ProtocolTCP, 80, "proxy")),
			pods: []*corev1.Pod{pod("a", npl(entry(15001, "198.18.0.11", 61000, "tcp")), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "envoy",
					RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
					Ports:         []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}}}}
			})},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "named targetPort that does not resolve skips that Pod for that port only",
			svc:  service(port(corev1.ProtocolTCP, 80, "http"), port(corev1.ProtocolTCP, 81, "admin")),
			pods: []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp")))},
			wantListeners: []lbmodel.Listener{
				listener(lbmodel.TCP, 80, up("198.18.0.11", 61000)),
				listener(lbmodel.TCP, 81),
			},
			wantReport: Report{ReadyBackends: 1, Skipped: []Skip{
				{Kind: SkipPod, Name: "shop/a", Reason: "targetPort admin of port 81/TCP does not resolve"},
			}},
		},
		{
			name: "TCP and UDP pools on the same port get only their protocol's entries",
			svc:  service(port(corev1.ProtocolTCP, 53, 5353), port(corev1.ProtocolUDP, 53, 5353)),
			pods: []*corev1.Pod{pod("a", npl(
				entry(5353, "198.18.0.11", 61000, "tcp"),
				entry(5353, "198.18.0.11", 61001, "udp"),
			))},
			wantListeners: []lbmodel.Listener{
				listener(lbmodel.TCP, 53, up("198.18.0.11", 61000)),
				listener(lbmodel.UDP, 53, up("198.18.0.11", 61001)),
			},
			wantReport: Report{ReadyBackends: 2},
		},
		{
			name: "protocol compares case-insensitively",
			svc:  service(udp53),
			pods: []*corev1.Pod{pod("a", rawNPL(
				`[{"podPort":5353,"nodeIP":"198.18.0.11","nodePort":61001,"protocol":"UDP","ipFamily":"IPv4"}]`))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.UDP, 53, up("198.18.0.11", 61001))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "Pods whose Ready condition is not True are left out",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{
				pod("ready", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("not-ready", notReady, npl(entry(8080, "198.18.0.11", 61001, "tcp"))),
				pod("no-condition", func(p *corev1.Pod) { p.Status.Conditions = nil },
					npl(entry(8080, "198.18.0.11", 61002, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "terminating Pods still in the annotation drain, whatever their readiness",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{
				pod("ready", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("terminating-ready", terminating, npl(entry(8080, "198.18.0.11", 61001, "tcp"))),
				pod("terminating-not-ready", terminating, notReady, npl(entry(8080, "198.18.0.11", 61002, "tcp"))),
				pod("terminating-unmapped", terminating),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80,
				up("198.18.0.11", 61000), drain("198.18.0.11", 61001), drain("198.18.0.11", 61002))},
			wantReport: Report{ReadyBackends: 1},
		},
		{
			name: "Succeeded and Failed Pods are left out",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{
				pod("done", phase(corev1.PodSucceeded), npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("failed", phase(corev1.PodFailed), npl(entry(8080, "198.18.0.11", 61001, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80)},
		},
		{
			name:          "a Pod without the annotation has no node port yet and is reported",
			svc:           service(tcp8080),
			pods:          []*corev1.Pod{pod("new")},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80)},
			wantReport: Report{Skipped: []Skip{{Kind: SkipPod, Name: "shop/new",
				Reason: "no node port yet: annotation nodeportlocal.antrea.io is absent"}}},
		},
		{
			name: "a malformed annotation makes that Pod contribute nothing, and is reported",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{
				pod("bad", rawNPL(`[{"podPort":8080,`)),
				pod("good", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport: Report{ReadyBackends: 1, Skipped: []Skip{{Kind: SkipPod, Name: "shop/bad",
				Reason: "parse nodeportlocal.antrea.io annotation: unexpected EOF"}}},
		},
		{
			name: "one bad entry rejects the whole annotation of that Pod",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{pod("bad", npl(
				entry(8080, "198.18.0.11", 61000, "tcp"),
				entry(8080, "198.18.0.11", 70000, "tcp"),
			))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80)},
			wantReport: Report{Skipped: []Skip{{Kind: SkipPod, Name: "shop/bad",
				Reason: "parse nodeportlocal.antrea.io annotation: entry 1: nodePort 70000 is out of 1-65535"}}},
		},
		{
			name:          "Antrea's format without ipFamily counts as IPv4",
			svc:           service(tcp8080),
			pods:          []*corev1.Pod{pod("a", rawNPL(`[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61000,"protocol":"tcp"}]`))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "IPv4 family leaves IPv6 entries out",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{pod("a", npl(
				entry(8080, "198.18.0.11", 61000, "tcp"),
				entry(8080, "2001:db8::11", 61001, "tcp"),
			))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name:   "IPv6 family keeps only IPv6 entries, in canonical form",
			family: "IPv6",
			svc:    service(tcp8080),
			pods: []*corev1.Pod{pod("a", npl(
				entry(8080, "198.18.0.11", 61000, "tcp"),
				entry(8080, "2001:DB8:0::11", 61001, "tcp"),
			))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("2001:db8::11", 61001))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "multi-port: one listener per port, sorted by protocol then port",
			svc: service(
				port(corev1.ProtocolUDP, 53, 5353),
				port(corev1.ProtocolTCP, 443, 8443),
				port(corev1.ProtocolTCP, 80, 8080),
			),
			pods: []*corev1.Pod{pod("a", npl(
				entry(8080, "198.18.0.11", 61000, "tcp"),
				entry(8443, "198.18.0.11", 61001, "tcp"),
				entry(5353, "198.18.0.11", 61002, "udp"),
			))},
			wantListeners: []lbmodel.Listener{
				listener(lbmodel.TCP, 80, up("198.18.0.11", 61000)),
				listener(lbmodel.TCP, 443, up("198.18.0.11", 61001)),
				listener(lbmodel.UDP, 53, up("198.18.0.11", 61002)),
			},
			wantReport: Report{ReadyBackends: 3},
		},
		{
			name:          "targetPort 0 means the Service port; empty protocol means TCP",
			svc:           service(corev1.ServicePort{Port: 8080}),
			pods:          []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp")))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 8080, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name:          "SCTP ports get no listener and are reported",
			svc:           service(port(corev1.ProtocolSCTP, 9000, 9000), tcp8080),
			pods:          []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp")))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport: Report{ReadyBackends: 1, Skipped: []Skip{
				{Kind: SkipPort, Name: "9000/SCTP", Reason: "protocol SCTP is not supported"}}},
		},
		{
			name: "Pods of another namespace or not fully matching the selector are ignored",
			svc: svcWith(service(tcp8080), func(s *corev1.Service) {
				s.Spec.Selector = map[string]string{"app": "web", "tier": "front"}
			}),
			pods: []*corev1.Pod{
				pod("match", labels(map[string]string{"app": "web", "tier": "front", "x": "y"}),
					npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("other-ns", inNamespace("other"), labels(map[string]string{"app": "web", "tier": "front"}),
					npl(entry(8080, "198.18.0.11", 61001, "tcp"))),
				pod("partial", labels(map[string]string{"app": "web"}), npl(entry(8080, "198.18.0.11", 61002, "tcp"))),
				pod("wrong-value", labels(map[string]string{"app": "web", "tier": "back"}),
					npl(entry(8080, "198.18.0.11", 61003, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name:          "an empty selector selects no Pod",
			svc:           svcWith(service(tcp8080), func(s *corev1.Service) { s.Spec.Selector = nil }),
			pods:          []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp")))},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80)},
			wantReport:    Report{Warnings: []string{"the Service has no selector and no EndpointSlice of it names a Pod: no Pods are selected"}},
		},
		{
			name: "no selector: the targetRefs of the Service's EndpointSlices choose its Pods",
			svc:  svcWith(service(tcp8080), func(s *corev1.Service) { s.Spec.Selector = nil }),
			pods: []*corev1.Pod{
				pod("named", labels(nil), npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("named-not-ready", notReady, npl(entry(8080, "198.18.0.11", 61001, "tcp"))),
				pod("unnamed", npl(entry(8080, "198.18.0.11", 61002, "tcp"))),
				pod("other-service", npl(entry(8080, "198.18.0.11", 61003, "tcp"))),
			},
			slices: []*discoveryv1.EndpointSlice{
				handSlice("web", "named", "named-not-ready"),
				handSlice("api", "other-service"),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name: "duplicate entries give one member; enabled wins over draining",
			svc:  service(tcp8080),
			pods: []*corev1.Pod{
				pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
				pod("a-old", terminating, npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("198.18.0.11", 61000))},
			wantReport:    Report{ReadyBackends: 1},
		},
	})
}

func TestBuild_nodePort(t *testing.T) {
	p80 := withNodePort(tcp8080, 30080)
	unschedulable := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	excluded := func(n *corev1.Node) {
		n.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: ""}
	}
	nodeNotReady := func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	}
	local := func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	runBuildCases(t, []buildCase{
		{
			name: "every Ready, schedulable node's InternalIP with the nodePort",
			mode: ServiceTypeNodePort,
			svc:  service(p80, withNodePort(udp53, 30053)),
			nodes: []*corev1.Node{
				node("n2", "198.18.0.12"),
				node("n1", "198.18.0.11"),
				nodeWith(node("n3", "198.18.0.13"), unschedulable),
				nodeWith(node("n4", "198.18.0.14"), excluded),
				nodeWith(node("n5", "198.18.0.15"), nodeNotReady),
				node("n6", "2001:db8::16"),
				nodeWith(node("n7", "198.18.0.17"), func(n *corev1.Node) {
					n.Status.Addresses[0].Type = corev1.NodeExternalIP
				}),
			},
			wantListeners: []lbmodel.Listener{
				listener(lbmodel.TCP, 80, up("198.18.0.11", 30080), up("198.18.0.12", 30080)),
				listener(lbmodel.UDP, 53, up("198.18.0.11", 30053), up("198.18.0.12", 30053)),
			},
			wantReport: Report{ReadyBackends: 4},
		},
		{
			name:          "IPv6 family picks each node's IPv6 InternalIP",
			mode:          ServiceTypeNodePort,
			family:        "IPv6",
			svc:           service(p80),
			nodes:         []*corev1.Node{node("n1", "198.18.0.11", "2001:db8::11"), node("n2", "198.18.0.12")},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("2001:db8::11", 30080))},
			wantReport:    Report{ReadyBackends: 1},
		},
		{
			name:          "nodePort 0 gives no members and a note",
			mode:          ServiceTypeNodePort,
			svc:           service(tcp8080),
			nodes:         []*corev1.Node{node("n1", "198.18.0.11")},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80)},
			wantReport:    Report{Warnings: []string{"port 80/TCP has no nodePort: no members"}},
		},
		{
			name:  "externalTrafficPolicy Local keeps only nodes running a backend",
			mode:  ServiceTypeNodePort,
			svc:   svcWith(service(p80), local),
			nodes: []*corev1.Node{node("n1", "198.18.0.11"), node("n2", "198.18.0.12"), node("n3", "198.18.0.13")},
			pods: []*corev1.Pod{
				pod("a", onNode("n1")),
				pod("b", onNode("n2"), terminating),
				pod("c", onNode("n3"), notReady),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80,
				up("198.18.0.11", 30080), drain("198.18.0.12", 30080))},
			wantReport: Report{ReadyBackends: 1},
		},
	})
}

func TestBuild_clusterIP(t *testing.T) {
	runBuildCases(t, []buildCase{
		{
			name: "Ready Pod IPs with the resolved targetPort; terminating Pods drain",
			mode: ServiceTypeClusterIP,
			svc:  service(port(corev1.ProtocolTCP, 80, "http")),
			pods: []*corev1.Pod{
				pod("a", podIPs("198.19.1.11")),
				pod("b", podIPs("198.19.1.12"), containerPorts(corev1.ContainerPort{Name: "http", ContainerPort: 9000})),
				pod("c", podIPs("198.19.1.13"), notReady),
				pod("d", podIPs("198.19.1.14"), terminating),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80,
				up("198.19.1.11", 8080), up("198.19.1.12", 9000), drain("198.19.1.14", 8080))},
			wantReport: Report{ReadyBackends: 2},
		},
		{
			name:   "IPv6 family uses each Pod's IPv6 address",
			mode:   ServiceTypeClusterIP,
			family: "IPv6",
			svc:    service(tcp8080),
			pods: []*corev1.Pod{
				pod("a", podIPs("198.19.1.11", "2001:db8:1::11")),
				pod("b", podIPs("198.19.1.12")),
			},
			wantListeners: []lbmodel.Listener{listener(lbmodel.TCP, 80, up("2001:db8:1::11", 8080))},
			wantReport: Report{ReadyBackends: 1, Skipped: []Skip{
				{Kind: SkipPod, Name: "shop/b", Reason: "no IPv6 Pod IP yet"}}},
		},
	})
}

func TestBuild_requestedVIP(t *testing.T) {
	withIP := func(ip string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.LoadBalancerIP = ip }
	}
	withAnnotation := func(ip string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Annotations = map[string]string{contract.LoadBalancerIPKey: ip} }
	}
	tests := []struct {
		name       string
		svc        *corev1.Service
		wantVIP    string
		wantReport Report
	}{
		{name: "none", svc: service(tcp8080)},
		{name: "from spec.loadBalancerIP", svc: svcWith(service(tcp8080), withIP("203.0.113.5")), wantVIP: "203.0.113.5"},
		{name: "from the annotation", svc: svcWith(service(tcp8080), withAnnotation("203.0.113.6")), wantVIP: "203.0.113.6"},
		{
			name:    "spec.loadBalancerIP wins over the annotation, with a warning",
			svc:     svcWith(service(tcp8080), withAnnotation("203.0.113.6"), withIP("203.0.113.5")),
			wantVIP: "203.0.113.5",
			wantReport: Report{Warnings: []string{
				`annotation npl.io/load-balancer-ip "203.0.113.6" ignored: spec.loadBalancerIP "203.0.113.5" is set`}},
		},
		{name: "IPv6 in canonical form", svc: svcWith(service(tcp8080), withIP("2001:DB8::0:5")), wantVIP: "2001:db8::5"},
		{
			name:       "invalid spec.loadBalancerIP: error, no VIP requested",
			svc:        svcWith(service(tcp8080), withIP("203.0.113.300")),
			wantReport: Report{Errors: []string{`spec.loadBalancerIP "203.0.113.300" is not an IP address: no VIP requested`}},
		},
		{
			name: "invalid annotation: error, no VIP requested",
			svc:  svcWith(service(tcp8080), withAnnotation("vip-1")),
			wantReport: Report{Errors: []string{
				`annotation npl.io/load-balancer-ip "vip-1" is not an IP address: no VIP requested`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb, report := Build(Input{ClusterName: testCluster, Service: tt.svc})
			if lb == nil {
				t.Fatalf("Build returned no model; report %+v", report)
			}
			if lb.RequestedVIP != tt.wantVIP {
				t.Errorf("RequestedVIP = %q, want %q", lb.RequestedVIP, tt.wantVIP)
			}
			if diff := cmp.Diff(tt.wantReport, report, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuild_rejectsUnusableInput(t *testing.T) {
	tests := []struct {
		name      string
		in        Input
		wantError string
	}{
		{"no Service", Input{ClusterName: testCluster}, "no Service to build from"},
		{"unknown service type", Input{ClusterName: testCluster, ServiceType: "HostPort", Service: service(tcp8080)},
			`unknown service type "HostPort"`},
		{"unknown family", Input{ClusterName: testCluster, Family: "ipv4", Service: service(tcp8080)},
			`unknown IP family "ipv4"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb, report := Build(tt.in)
			if lb != nil {
				t.Errorf("Build returned a model %+v, want none", lb)
			}
			if diff := cmp.Diff(Report{Errors: []string{tt.wantError}}, report, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuild_namesFollowTheProviderScheme(t *testing.T) {
	svc := service(tcp8080)
	svc.Namespace, svc.Name = "team-a", "api"
	lb, _ := Build(Input{ClusterName: "prod", Service: svc})
	got := []string{lb.Name, lb.Service, lb.Listeners[0].Pool.Name}
	want := []string{"prod--team-a_api", "team-a/api", "prod--team-a_api-TCP-80"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

func TestBuild_doesNotModifyItsInput(t *testing.T) {
	svc := service(tcp8080, udp53)
	pods := []*corev1.Pod{
		pod("b", npl(entry(8080, "198.18.0.12", 61000, "tcp"), entry(5353, "198.18.0.12", 61001, "udp"))),
		pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp"))),
	}
	wantSvc, wantPods := svc.DeepCopy(), []*corev1.Pod{pods[0].DeepCopy(), pods[1].DeepCopy()}
	Build(Input{ClusterName: testCluster, Service: svc, Pods: pods})
	if diff := cmp.Diff(wantSvc, svc); diff != "" {
		t.Errorf("Service modified (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(wantPods, pods); diff != "" {
		t.Errorf("Pods modified (-before +after):\n%s", diff)
	}
}

func TestSelects(t *testing.T) {
	svc := service(tcp8080)
	noSelector := svcWith(service(tcp8080), func(s *corev1.Service) { s.Spec.Selector = map[string]string{} })
	tests := []struct {
		name string
		svc  *corev1.Service
		pod  *corev1.Pod
		want bool
	}{
		{"matching labels", svc, pod("a"), true},
		{"finished Pods still match (the controller must see them go)", svc, pod("a", phase(corev1.PodSucceeded)), true},
		{"other namespace", svc, pod("a", inNamespace("other")), false},
		{"missing label", svc, pod("a", labels(map[string]string{"tier": "front"})), false},
		{"different value", svc, pod("a", labels(map[string]string{"app": "api"})), false},
		{"empty selector selects nothing", noSelector, pod("a"), false},
		{"nil Pod", svc, nil, false},
		{"nil Service", nil, pod("a"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := contract.Selects(tt.svc, tt.pod); got != tt.want {
				t.Errorf("Selects() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReport_Summary(t *testing.T) {
	r := Report{
		Warnings: []string{"port 80/TCP has no nodePort: no members"},
		Skipped: []Skip{
			{Kind: SkipPort, Name: "9000/SCTP", Reason: "protocol SCTP is not supported"},
			{Kind: SkipPod, Name: "shop/a", Reason: "no IPv6 Pod IP yet"},
			{Kind: SkipPod, Name: "shop/b", Reason: "no IPv6 Pod IP yet"},
		},
	}
	tests := []struct {
		limit int
		want  string
	}{
		{3, "port 80/TCP has no nodePort: no members; port 9000/SCTP: protocol SCTP is not supported; " +
			"pod shop/a: no IPv6 Pod IP yet; pod shop/b: no IPv6 Pod IP yet"},
		{1, "port 80/TCP has no nodePort: no members; port 9000/SCTP: protocol SCTP is not supported; and 2 more skipped"},
		{0, "port 80/TCP has no nodePort: no members; and 3 more skipped"},
	}
	for _, tt := range tests {
		if got := r.Summary(tt.limit); got != tt.want {
			t.Errorf("Summary(%d) = %q\nwant %q", tt.limit, got, tt.want)
		}
	}
	if got := (Report{}).Summary(5); got != "" {
		t.Errorf("empty report Summary = %q, want empty", got)
	}
}

func TestMovedMembers(t *testing.T) {
	const ip = "198.19.0.1"
	tcp, udp := entry(8080, ip, 61000, "tcp"), entry(8080, ip, 61000, "udp")
	cases := []struct {
		name     string
		old, cur *corev1.Pod
		want     []lbmodel.Member
	}{
		{"moved to another node port", pod("a", npl(tcp)), pod("a", npl(entry(8080, ip, 61900, "tcp"))),
			[]lbmodel.Member{{IP: ip, Port: 61000}}},
		{"one protocol moved, the other kept", pod("a", npl(tcp, udp)), pod("a", npl(entry(8080, ip, 61900, "tcp"), udp)),
			[]lbmodel.Member{{IP: ip, Port: 61000}}},
		{"unchanged", pod("a", npl(tcp)), pod("a", npl(tcp)), nil},
		{"mapping dropped: not a move", pod("a", npl(tcp, entry(9090, ip, 61001, "tcp"))), pod("a", npl(tcp)), nil},
		{"first annotation", pod("a"), pod("a", npl(tcp)), nil},
		{"annotation removed", pod("a", npl(tcp)), pod("a"), nil},
		{"malformed new annotation", pod("a", npl(tcp)), pod("a", rawNPL(`[{"podPort":8080}]`)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MovedMembers(tc.old, tc.cur)); diff != "" {
				t.Errorf("MovedMembers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuild_clientIPAffinityPersistsEveryPoolOnTheSource: a Service's
// sessionAffinity ClientIP keeps each client address on one member of
// every pool (TCP and UDP, any mode), idle for the Service's timeout or
// Kubernetes' default 10800 s; without it the pools have no policy.
func TestBuild_clientIPAffinityPersistsEveryPoolOnTheSource(t *testing.T) {
	sticky := func(seconds int32) *lbmodel.Policy {
		return &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: seconds}}
	}
	for _, c := range []struct {
		name string
		mod  func(*corev1.Service)
		want *lbmodel.Policy
	}{
		{"no affinity", func(*corev1.Service) {}, nil},
		{"None", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityNone }, nil},
		{"ClientIP, the default timeout", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }, sticky(10800)},
		{"ClientIP with its timeout", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		}, sticky(60)},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []string{ServiceTypeNodePortLocal, ServiceTypeNodePort, ServiceTypeClusterIP} {
				lb, report := Build(Input{ClusterName: testCluster, ServiceType: mode, Service: svcWith(service(tcp8080, udp53), c.mod),
					Pods: []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp")))}})
				if lb == nil || len(lb.Listeners) != 2 {
					t.Fatalf("%s: model %+v, report %+v", mode, lb, report)
				}
				for _, l := range lb.Listeners {
					if diff := cmp.Diff(c.want, l.Pool.Policy); diff != "" {
						t.Errorf("%s: policy of pool %s (-want +got):\n%s", mode, l.Pool.Name, diff)
					}
				}
				if c.want != nil && lb.Listeners[0].Pool.Policy == lb.Listeners[1].Pool.Policy {
					t.Errorf("%s: the pools share one policy", mode)
				}
				if _, err := lbmodel.Normalize(lb); err != nil {
					t.Errorf("%s: Normalize: %v", mode, err)
				}
			}
		})
	}
}
