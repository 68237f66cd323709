package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/providers"
)

func TestRegisteredIn(t *testing.T) {
	settings := Settings{ClusterName: "c", ServiceType: builder.ServiceTypeNodePortLocal}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}
	pod := func(ann string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.0.5", Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}},
		}
		if ann != "" {
			p.Annotations = map[string]string{contract.PodKey: ann}
		}
		return p
	}
	const ann = `[{"podPort":8080,"nodeIP":"198.18.0.10","nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"}]`
	pool := providers.PoolName(providers.LoadBalancerName("c", "ns", "web"), providers.TCP, 80)
	lb := func(members ...providers.Member) *providers.LoadBalancer {
		return &providers.LoadBalancer{Listeners: []providers.Listener{{Port: 80, Protocol: providers.TCP,
			Pool: providers.Pool{Name: pool, Members: members}}}}
	}
	member := providers.Member{IP: "198.18.0.10", Port: 61000, Enabled: true}
	cases := []struct {
		name     string
		settings Settings
		pod      *corev1.Pod
		lb       *providers.LoadBalancer
		want     bool
	}{
		{"its member is applied", settings, pod(ann), lb(member), true},
		{"its member is missing", settings, pod(ann), lb(providers.Member{IP: "198.18.0.11", Port: 61000, Enabled: true}), false},
		{"its member is disabled", settings, pod(ann), lb(providers.Member{IP: "198.18.0.10", Port: 61000}), false},
		{"no annotation yet", settings, pod(""), lb(), false},
		{"NodePort mode: members are nodes", Settings{ClusterName: "c", ServiceType: builder.ServiceTypeNodePort}, pod(""), lb(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := registeredIn(tc.settings, svc, tc.pod, tc.lb); got != tc.want {
				t.Errorf("registeredIn = %v, want %v", got, tc.want)
			}
		})
	}
}
