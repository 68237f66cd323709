package contract

import corev1 "k8s.io/api/core/v1"

// TrimPod returns a copy of pod that keeps only what both npl-agent and
// npl-lbsync read of every Pod, so that their informer caches stay small
// and agree: identity, labels, deletion, the nodeportlocal.antrea.io
// annotation, the node, the ports of the regular and the restartable
// (sidecar) init containers (ResolveTargetPort and HostPort read them),
// phase and IPs. Each side adds what only it reads.
func TrimPod(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = pod.Name, pod.Namespace, pod.UID, pod.ResourceVersion
	out.Labels = pod.Labels
	out.DeletionTimestamp = pod.DeletionTimestamp
	if v, ok := pod.Annotations[PodKey]; ok {
		out.Annotations = map[string]string{PodKey: v}
	}
	out.Spec.NodeName = pod.Spec.NodeName
	out.Spec.Containers = trimContainers(pod.Spec.Containers, false)
	out.Spec.InitContainers = trimContainers(pod.Spec.InitContainers, true)
	out.Status.Phase = pod.Status.Phase
	out.Status.PodIP, out.Status.PodIPs = pod.Status.PodIP, pod.Status.PodIPs
	return out
}

// trimContainers keeps the name, ports and restart policy of the
// containers with ports; of init containers, only the sidecars'.
func trimContainers(cs []corev1.Container, sidecarsOnly bool) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		if len(c.Ports) == 0 || (sidecarsOnly && !isSidecar(c)) {
			continue
		}
		out = append(out, corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
	}
	return out
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
