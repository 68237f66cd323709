package contract

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestTrimPod_keepsWhatTheContractReadsAndNothingElse(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{PodKey: `[{"podPort":8080,"nodeIP":"198.18.0.10","nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"}]`, "other": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{NodeName: "n1",
			Containers: []corev1.Container{
				{Name: "web", Image: "web:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}},
				{Name: "log", Image: "log:1"},
			},
			InitContainers: []corev1.Container{
				{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 9000}}},
				{Name: "setup", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 9001}}},
			},
			Volumes: []corev1.Volume{{Name: "data"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.0.5", PodIPs: []corev1.PodIP{{IP: "198.19.0.5"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	got := TrimPod(pod)
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels: pod.Labels, Annotations: map[string]string{PodKey: pod.Annotations[PodKey]}},
		Spec: corev1.PodSpec{NodeName: "n1",
			Containers:     []corev1.Container{{Name: "web", Ports: pod.Spec.Containers[0].Ports}},
			InitContainers: []corev1.Container{{Name: "proxy", RestartPolicy: &always, Ports: pod.Spec.InitContainers[0].Ports}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.0.5", PodIPs: pod.Status.PodIPs},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TrimPod (-want +got):\n%s", diff)
	}
	// Named ports resolve on the trimmed Pod as on the whole one, the
	// sidecar's included, and a plain init container's stays unresolved.
	for _, name := range []string{"http", "admin", "setup"} {
		sp := corev1.ServicePort{Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString(name)}
		p1, ok1 := ResolveTargetPort(pod, sp)
		p2, ok2 := ResolveTargetPort(got, sp)
		if p1 != p2 || ok1 != ok2 {
			t.Errorf("port %s resolves to %d,%v on the Pod and %d,%v trimmed", name, p1, ok1, p2, ok2)
		}
	}
}
