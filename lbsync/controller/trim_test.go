package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/contract"
)

func trimTestPod(name string, gates ...corev1.PodConditionType) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, Reason: "r"},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady", Message: "m"},
			{Type: contract.RegisteredReadinessGate, Status: corev1.ConditionFalse, Reason: reasonNotRegistered},
		}},
	}
	for _, g := range gates {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
	}
	return pod
}

func TestTrimmer_podsOfOneTemplateShareLabelsContainersAndConditions(t *testing.T) {
	tr := newTrimmer()
	a, _ := tr.trim(trimTestPod("a"))
	b, _ := tr.trim(trimTestPod("b"))
	pa, pb := a.(*corev1.Pod), b.(*corev1.Pod)
	if pa.Labels["app"] != "web" || len(pb.Spec.Containers) != 1 || pb.Spec.Containers[0].Ports[0].ContainerPort != 8080 {
		t.Fatalf("trimmed Pod lost what the builders read: %+v", pb)
	}
	pa.Labels["probe"] = "x" // the maps are one
	if pb.Labels["probe"] != "x" {
		t.Error("two Pods with the same labels hold two maps")
	}
	if &pa.Spec.Containers[0] != &pb.Spec.Containers[0] {
		t.Error("two Pods with the same containers hold two slices")
	}
	if &pa.Status.Conditions[0] != &pb.Status.Conditions[0] {
		t.Error("two Pods of the same readiness hold two slices of conditions")
	}
	other := trimTestPod("c")
	other.Spec.Containers[0].Ports[0].ContainerPort = 9090
	c, _ := tr.trim(other)
	if got := c.(*corev1.Pod).Spec.Containers[0].Ports[0].ContainerPort; got != 9090 {
		t.Errorf("a Pod with other ports got port %d", got)
	}
}

func TestTrimPod_keepsTheConditionsReadinessReads(t *testing.T) {
	types := func(p *corev1.Pod) []corev1.PodConditionType {
		var out []corev1.PodConditionType
		for _, c := range p.Status.Conditions {
			out = append(out, c.Type)
		}
		return out
	}
	plain := trimPod(trimTestPod("a"))
	if got := types(plain); len(got) != 1 || got[0] != corev1.PodReady || plain.Status.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("without gates: conditions %v, want Ready alone", plain.Status.Conditions)
	}
	gatedPod := trimPod(trimTestPod("b", contract.RegisteredReadinessGate))
	want := []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady, contract.RegisteredReadinessGate}
	got := types(gatedPod)
	if len(got) != len(want) {
		t.Fatalf("with our gate: conditions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("with our gate: conditions %v, want %v", got, want)
		}
	}
	if r := gatedPod.Status.Conditions[2].Reason; r != reasonNotRegistered {
		t.Errorf("the gate's condition lost its reason: %q", r)
	}
}
