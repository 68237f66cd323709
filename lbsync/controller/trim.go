package controller

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
)

// trim is the informer transform: it keeps only what npl-lbsync reads, to
// bound the memory of its caches (a Pod costs a few hundred bytes instead of
// tens of KiB with managedFields, env, volumes and status details).
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *corev1.Service:
		out := o.DeepCopy()
		out.ManagedFields = nil
		delete(out.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
		return out, nil
	case *corev1.Node:
		out := &corev1.Node{}
		out.Name, out.UID, out.ResourceVersion, out.Labels = o.Name, o.UID, o.ResourceVersion, o.Labels
		out.Spec.Unschedulable = o.Spec.Unschedulable
		out.Status.Addresses = o.Status.Addresses
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.NodeReady {
				out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		return out, nil
	}
	return obj, nil
}

// trimPod keeps what contract.TrimPod keeps, and what decides membership
// and registration: the readiness gates, their conditions, Ready and
// ContainersReady (builder, readiness.go), and the host IP.
func trimPod(pod *corev1.Pod) *corev1.Pod {
	out := contract.TrimPod(pod)
	out.Spec.ReadinessGates = pod.Spec.ReadinessGates
	out.Status.HostIP = pod.Status.HostIP
	keep := map[corev1.PodConditionType]bool{corev1.PodReady: true, corev1.ContainersReady: true}
	for _, g := range pod.Spec.ReadinessGates {
		keep[g.ConditionType] = true
	}
	for _, c := range pod.Status.Conditions {
		if keep[c.Type] {
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	return out
}
