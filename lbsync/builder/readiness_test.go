package builder

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
)

// gated gives the Pod readiness gates and sets their conditions and
// ContainersReady; Ready is False, as the kubelet reports while a gate is.
func gated(containersReady bool, gates map[corev1.PodConditionType]corev1.ConditionStatus) podMod {
	return func(p *corev1.Pod) {
		cr := corev1.ConditionFalse
		if containersReady {
			cr = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionFalse},
			{Type: corev1.ContainersReady, Status: cr},
		}
		for t, s := range gates {
			p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: t})
			if s != "" {
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s})
			}
		}
	}
}

func TestBuild_readinessGateDoesNotKeepAPodOutOfItsPools(t *testing.T) {
	ours := corev1.PodConditionType(contract.RegisteredReadinessGate)
	cases := []struct {
		name string
		mod  podMod
		want bool
	}{
		{"our gate pending, containers ready: a member", gated(true, map[corev1.PodConditionType]corev1.ConditionStatus{ours: ""}), true},
		{"our gate False, containers ready: a member", gated(true, map[corev1.PodConditionType]corev1.ConditionStatus{ours: corev1.ConditionFalse}), true},
		{"our gate, containers not ready: not a member", gated(false, map[corev1.PodConditionType]corev1.ConditionStatus{ours: ""}), false},
		{"our gate and another False gate: not a member", gated(true, map[corev1.PodConditionType]corev1.ConditionStatus{ours: "", "example.com/other": corev1.ConditionFalse}), false},
		{"our gate and another True gate: a member", gated(true, map[corev1.PodConditionType]corev1.ConditionStatus{ours: "", "example.com/other": corev1.ConditionTrue}), true},
		{"only another gate pending: not a member", gated(true, map[corev1.PodConditionType]corev1.ConditionStatus{"example.com/other": ""}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lb, _ := Build(Input{
				ClusterName: "c1", Service: service(port(corev1.ProtocolTCP, 80, "http")),
				Pods: []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp")), tc.mod)},
			})
			got := len(lb.Listeners[0].Pool.Members) == 1
			if got != tc.want {
				t.Errorf("member = %v, want %v (members %v)", got, tc.want, lb.Listeners[0].Pool.Members)
			}
		})
	}
}
