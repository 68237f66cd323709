package cluster

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Pod annotations that steer the kubelet stand-in; kubectl can set them too.
const (
	// AnnotationReady set to "false" makes the Pod's containers not ready;
	// any other value, or removing it, makes them ready again.
	AnnotationReady = "test.npl.io/ready"
	// AnnotationReadinessDelay (a Go duration, "2s") is how long after start
	// the containers become ready; it overrides Options.ReadinessDelay.
	AnnotationReadinessDelay = "test.npl.io/readiness-delay"
	// AnnotationTerminationDelay (a Go duration) is how long a deleted Pod
	// keeps running and serving, as a preStop sleep makes it; it overrides
	// Options.TerminationDelay.
	AnnotationTerminationDelay = "test.npl.io/termination-delay"
)

// runningPod is what the kubelet stand-in knows about a Pod it runs.
type runningPod struct {
	hostIP netip.Addr
	podIP  netip.Addr
	// hostIPv6 and podIPv6 are set in a dual-stack cluster only.
	hostIPv6 netip.Addr
	podIPv6  netip.Addr
	started  time.Time
	// readinessDelay applies when the Pod has no readiness-delay annotation.
	readinessDelay time.Duration
}

// readinessDelay returns the Pod's readiness delay: its annotation if set and
// valid, else def. The error says why an annotation was ignored.
func readinessDelay(pod *corev1.Pod, def time.Duration) (time.Duration, error) {
	v, ok := pod.Annotations[AnnotationReadinessDelay]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return def, fmt.Errorf("annotation %s=%q is not a non-negative duration", AnnotationReadinessDelay, v)
	}
	return d, nil
}

// kubeletStatus returns the status a kubelet would write for a running Pod at
// time now, starting from the Pod's current status so that what other
// controllers own (their conditions, fields we do not know) is kept, and
// timestamps stay put while nothing changes. recheck is how long until
// readiness changes by itself (a readiness delay running out), or 0.
func kubeletStatus(pod *corev1.Pod, rp runningPod, now time.Time) (status corev1.PodStatus, recheck time.Duration) {
	st := *pod.Status.DeepCopy()
	started := metav1.NewTime(rp.started.Truncate(time.Second))
	transition := metav1.NewTime(now.Truncate(time.Second))

	ready := pod.Annotations[AnnotationReady] != "false"
	delay, _ := readinessDelay(pod, rp.readinessDelay)
	if remaining := rp.started.Add(delay).Sub(now); remaining > 0 {
		ready, recheck = false, remaining
	}

	st.Phase = corev1.PodRunning
	st.HostIP, st.HostIPs = rp.hostIP.String(), []corev1.HostIP{{IP: rp.hostIP.String()}}
	st.PodIP, st.PodIPs = rp.podIP.String(), []corev1.PodIP{{IP: rp.podIP.String()}}
	if rp.hostIPv6.IsValid() {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: rp.hostIPv6.String()})
	}
	if rp.podIPv6.IsValid() {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: rp.podIPv6.String()})
	}
	if st.StartTime == nil {
		st.StartTime = &started
	}

	var unready []string
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, runningStatus(pod, c, findStatus(st.ContainerStatuses, c.Name), ready, started))
		if !ready {
			unready = append(unready, c.Name)
		}
	}
	st.ContainerStatuses = statuses
	var initStatuses []corev1.ContainerStatus
	for _, c := range pod.Spec.InitContainers {
		prev := findStatus(st.InitContainerStatuses, c.Name)
		if isSidecar(c) {
			initStatuses = append(initStatuses, runningStatus(pod, c, prev, ready, started))
			if !ready {
				unready = append(unready, c.Name)
			}
			continue
		}
		initStatuses = append(initStatuses, completedStatus(pod, c, prev, started))
	}
	st.InitContainerStatuses = initStatuses

	setCondition(&st.Conditions, corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue}, transition)
	setCondition(&st.Conditions, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, transition)
	containersReady := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	if len(unready) > 0 {
		containersReady.Status = corev1.ConditionFalse
		containersReady.Reason = "ContainersNotReady"
		containersReady.Message = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	}
	setCondition(&st.Conditions, containersReady, transition)
	podReady := containersReady
	podReady.Type = corev1.PodReady
	if len(unready) == 0 {
		podReady = readinessGatesCondition(pod.Spec.ReadinessGates, st.Conditions)
	}
	setCondition(&st.Conditions, podReady, transition)
	if findCondition(st.Conditions, corev1.PodScheduled) == nil {
		setCondition(&st.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, transition)
	}
	return st, recheck
}

// readinessGatesCondition is the Ready condition of a Pod whose containers
// are ready: True only when every readiness gate's condition is True, with
// the kubelet's reason and message otherwise.
func readinessGatesCondition(gates []corev1.PodReadinessGate, conds []corev1.PodCondition) corev1.PodCondition {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	var msgs []string
	for _, g := range gates {
		c := findCondition(conds, g.ConditionType)
		switch {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		case c.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", g.ConditionType, c.Status))
		}
	}
	if len(msgs) > 0 {
		ready.Status = corev1.ConditionFalse
		ready.Reason = "ReadinessGatesNotReady"
		ready.Message = strings.Join(msgs, ", ")
	}
	return ready
}

// runningStatus is a running container's status; the start time of an
// already running container is kept.
func runningStatus(pod *corev1.Pod, c corev1.Container, prev *corev1.ContainerStatus, ready bool, started metav1.Time) corev1.ContainerStatus {
	cs := baseStatus(pod, c, prev)
	if prev == nil || prev.State.Running == nil {
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	}
	cs.Ready = ready
	cs.Started = ptr.To(true)
	return cs
}

// completedStatus is an ordinary init container's status: it ran and exited 0.
func completedStatus(pod *corev1.Pod, c corev1.Container, prev *corev1.ContainerStatus, started metav1.Time) corev1.ContainerStatus {
	cs := baseStatus(pod, c, prev)
	if prev == nil || prev.State.Terminated == nil {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: started, ContainerID: cs.ContainerID,
		}}
	}
	cs.Ready = true
	cs.Started = ptr.To(false)
	return cs
}

func baseStatus(pod *corev1.Pod, c corev1.Container, prev *corev1.ContainerStatus) corev1.ContainerStatus {
	var cs corev1.ContainerStatus
	if prev != nil {
		cs = *prev.DeepCopy()
	}
	cs.Name = c.Name
	cs.Image = c.Image
	cs.ImageID = c.Image
	cs.ContainerID = fmt.Sprintf("npl://%s-%s", pod.UID, c.Name)
	return cs
}

func findStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// setCondition sets a condition the kubelet owns, keeping its transition time
// (and what we do not set) when its status does not change.
func setCondition(conds *[]corev1.PodCondition, want corev1.PodCondition, now metav1.Time) {
	if c := findCondition(*conds, want.Type); c != nil {
		if c.Status != want.Status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = want.Status, want.Reason, want.Message
		return
	}
	want.LastTransitionTime = now
	*conds = append(*conds, want)
}
