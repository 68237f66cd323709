package contract

// ResolveTargetPort and HostPort resolve a Service port's targetPort against
// a Pod's container ports. npl-agent uses them to decide which Pod ports to
// map and npl-lbsync to decide which annotation entries belong to a Service
// port, so both sides agree by construction.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ResolveTargetPort returns the numeric Pod port that a Service port targets on pod.
// A numeric targetPort is returned as is (0 means the Service port itself, as
// Kubernetes defaults it). A named targetPort resolves against the ports of
// the regular containers and of restartable (sidecar) init containers whose
// name and protocol match; ok is false when it does not resolve.
func ResolveTargetPort(pod *corev1.Pod, sp corev1.ServicePort) (port int32, ok bool) {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	switch {
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		name := sp.TargetPort.StrVal
		for _, c := range containers(pod) {
			for _, cp := range c.Ports {
				if cp.Name == name && protocolOf(cp) == proto {
					return cp.ContainerPort, true
				}
			}
		}
		return 0, false
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal, true
	default:
		return sp.Port, true
	}
}

// HostPort returns the hostPort that a container declares for port and
// protocol, or 0. Antrea publishes such a port as is, with no rule.
func HostPort(pod *corev1.Pod, port int32, proto corev1.Protocol) int32 {
	for _, c := range containers(pod) {
		for _, cp := range c.Ports {
			if cp.ContainerPort == port && protocolOf(cp) == proto && cp.HostPort != 0 {
				return cp.HostPort
			}
		}
	}
	return 0
}

func protocolOf(cp corev1.ContainerPort) corev1.Protocol {
	if cp.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return cp.Protocol
}

// containers lists the regular containers and the restartable init
// containers (sidecars), which keep running beside them.
func containers(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
	out = append(out, pod.Spec.Containers...)
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(c) {
			out = append(out, c)
		}
	}
	return out
}
