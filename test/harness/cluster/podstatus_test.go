package cluster

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// statusSummary is the part of a Pod status the kubelet stand-in decides.
type statusSummary struct {
	Phase      corev1.PodPhase
	PodIP      string
	HostIP     string
	Conditions map[corev1.PodConditionType]string // "True", or "False: <reason>"
	Containers map[string]string                  // name: "running ready" / "running not-ready" / "completed"
	Recheck    time.Duration
}

func summarize(st corev1.PodStatus, recheck time.Duration) statusSummary {
	s := statusSummary{
		Phase: st.Phase, PodIP: st.PodIP, HostIP: st.HostIP, Recheck: recheck,
		Conditions: map[corev1.PodConditionType]string{}, Containers: map[string]string{},
	}
	for _, c := range st.Conditions {
		v := string(c.Status)
		if c.Reason != "" {
			v += ": " + c.Reason
		}
		s.Conditions[c.Type] = v
	}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), st.ContainerStatuses...), st.InitContainerStatuses...) {
		switch {
		case cs.State.Terminated != nil:
			s.Containers[cs.Name] = "completed"
		case cs.State.Running != nil && cs.Ready:
			s.Containers[cs.Name] = "running ready"
		case cs.State.Running != nil:
			s.Containers[cs.Name] = "running not-ready"
		}
	}
	return s
}

func TestKubeletStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const gate = corev1.PodConditionType("npl.io/lb-registered")
	allTrue := func(extra map[corev1.PodConditionType]string) map[corev1.PodConditionType]string {
		m := map[corev1.PodConditionType]string{
			corev1.PodReadyToStartContainers: "True", corev1.PodInitialized: "True",
			corev1.ContainersReady: "True", corev1.PodReady: "True", corev1.PodScheduled: "True",
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		pod     func(*corev1.Pod)
		delay   time.Duration // Options.ReadinessDelay
		started time.Duration // how long ago the Pod started
		want    statusSummary
	}{
		{
			name:    "a started Pod is Running and Ready with its addresses",
			started: time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(nil), Containers: map[string]string{"app": "running ready"}},
		},
		{
			name:    "ready annotation false makes the containers and the Pod not ready",
			pod:     func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationReady: "false"} },
			started: time.Minute,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(map[corev1.PodConditionType]string{
					corev1.ContainersReady: "False: ContainersNotReady", corev1.PodReady: "False: ContainersNotReady",
				}),
				Containers: map[string]string{"app": "running not-ready"}},
		},
		{
			name:    "default readiness delay not over: not ready, check again when it is",
			delay:   3 * time.Second,
			started: time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(map[corev1.PodConditionType]string{
					corev1.ContainersReady: "False: ContainersNotReady", corev1.PodReady: "False: ContainersNotReady",
				}),
				Containers: map[string]string{"app": "running not-ready"}, Recheck: 2 * time.Second},
		},
		{
			name:    "readiness delay annotation overrides the default",
			pod:     func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationReadinessDelay: "1s"} },
			delay:   time.Hour,
			started: 2 * time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(nil), Containers: map[string]string{"app": "running ready"}},
		},
		{
			name:    "missing readiness gate condition keeps the Pod not Ready, containers ready",
			pod:     func(p *corev1.Pod) { p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}} },
			started: time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(map[corev1.PodConditionType]string{corev1.PodReady: "False: ReadinessGatesNotReady"}),
				Containers: map[string]string{"app": "running ready"}},
		},
		{
			name: "readiness gate condition False keeps the Pod not Ready and is kept",
			pod: func(p *corev1.Pod) {
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
				p.Status.Conditions = []corev1.PodCondition{{Type: gate, Status: corev1.ConditionFalse, Reason: "Pending"}}
			},
			started: time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(map[corev1.PodConditionType]string{
					corev1.PodReady: "False: ReadinessGatesNotReady", gate: "False: Pending",
				}),
				Containers: map[string]string{"app": "running ready"}},
		},
		{
			name: "readiness gate condition True makes the Pod Ready",
			pod: func(p *corev1.Pod) {
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
				p.Status.Conditions = []corev1.PodCondition{{Type: gate, Status: corev1.ConditionTrue}}
			},
			started: time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(map[corev1.PodConditionType]string{gate: "True"}),
				Containers: map[string]string{"app": "running ready"}},
		},
		{
			name: "sidecars run and count for readiness, ordinary init containers completed",
			pod: func(p *corev1.Pod) {
				p.Annotations = map[string]string{AnnotationReady: "false"}
				p.Spec.InitContainers = []corev1.Container{
					{Name: "setup", Image: "x"},
					{Name: "proxy", Image: "x", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
				}
			},
			started: time.Second,
			want: statusSummary{Phase: corev1.PodRunning, PodIP: "198.19.1.7", HostIP: "198.18.0.11",
				Conditions: allTrue(map[corev1.PodConditionType]string{
					corev1.ContainersReady: "False: ContainersNotReady", corev1.PodReady: "False: ContainersNotReady",
				}),
				Containers: map[string]string{"app": "running not-ready", "proxy": "running not-ready", "setup": "completed"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.pod != nil {
				tt.pod(pod)
			}
			st, recheck := kubeletStatus(pod, runningPod{
				hostIP: netip.MustParseAddr("198.18.0.11"), podIP: netip.MustParseAddr("198.19.1.7"),
				started: now.Add(-tt.started), readinessDelay: tt.delay,
			}, now)
			if diff := cmp.Diff(tt.want, summarize(st, recheck)); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// Recomputing the status of a Pod whose status we wrote must give the same
// status, through the apiserver's JSON round trip: otherwise every write
// would trigger another one.
func TestKubeletStatus_isStableSoNothingIsRewritten(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	pod := testPod()
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "x"},
		{Name: "proxy", Image: "x", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: "example.com/other", Status: corev1.ConditionTrue}}
	rp := runningPod{hostIP: netip.MustParseAddr("198.18.0.11"), podIP: netip.MustParseAddr("198.19.1.7"), started: start}

	first, _ := kubeletStatus(pod, rp, start.Add(time.Second))
	pod.Status = first
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var stored corev1.Pod
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	again, _ := kubeletStatus(&stored, rp, start.Add(time.Minute))
	if !equality.Semantic.DeepEqual(again, stored.Status) {
		t.Errorf("recomputed status differs from the stored one (-stored +recomputed):\n%s", cmp.Diff(stored.Status, again))
	}
}

func TestKubeletStatus_keepsTransitionTimeUntilStatusChanges(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	pod := testPod()
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: earlier},
	}
	rp := runningPod{hostIP: netip.MustParseAddr("198.18.0.11"), podIP: netip.MustParseAddr("198.19.1.7"), started: now.Add(-time.Hour)}

	st, _ := kubeletStatus(pod, rp, now)
	if got := findCondition(st.Conditions, corev1.PodReady).LastTransitionTime; !got.Equal(&earlier) {
		t.Errorf("Ready stayed True but its transition time moved to %v", got)
	}
	pod.Annotations = map[string]string{AnnotationReady: "false"}
	st, _ = kubeletStatus(pod, rp, now)
	if got := findCondition(st.Conditions, corev1.PodReady).LastTransitionTime; !got.Time.Equal(now) {
		t.Errorf("Ready turned False but its transition time is %v, want %v", got, now)
	}
}

func TestDeclaredPorts_listsTCPAndUDPOfContainersAndSidecarsOnce(t *testing.T) {
	pod := testPod()
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{ContainerPort: 8080},
		{ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
		{ContainerPort: 9000, Protocol: corev1.ProtocolSCTP},
	}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "twin", Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}})
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Ports: []corev1.ContainerPort{{ContainerPort: 7000}}},
		{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Ports: []corev1.ContainerPort{{ContainerPort: 15001}}},
	}
	want := []podPort{
		{5353, corev1.ProtocolUDP},
		{8080, corev1.ProtocolTCP},
		{15001, corev1.ProtocolTCP},
	}
	if diff := cmp.Diff(want, declaredPorts(pod), cmp.AllowUnexported(podPort{})); diff != "" {
		t.Errorf("declaredPorts (-want +got):\n%s", diff)
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"},
		Spec:       corev1.PodSpec{NodeName: "npl-node-1", Containers: []corev1.Container{{Name: "app", Image: "npl.io/app"}}},
	}
}
