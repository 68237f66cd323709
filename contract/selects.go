package contract

import (
	corev1 "k8s.io/api/core/v1"
)

// Selects reports whether svc's selector selects pod: the same namespace, a
// selector that is not empty, and every one of its labels on the Pod with
// the same value. A Service without a selector selects no Pod (its
// endpoints are managed by hand). It ignores the Pod's phase, so a
// controller can also map a Pod that just finished to its Services.
func Selects(svc *corev1.Service, pod *corev1.Pod) bool {
	if svc == nil || pod == nil || pod.Namespace != svc.Namespace || len(svc.Spec.Selector) == 0 {
		return false
	}
	for k, v := range svc.Spec.Selector {
		if got, ok := pod.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
