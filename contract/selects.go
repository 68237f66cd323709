package contract

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// HandWrittenSlices is the label selector of the EndpointSlices that can
// choose the Pods of a Service without a selector: every slice the
// EndpointSlice controller does not manage (it writes slices only for
// Services with a selector). npl-agent and npl-lbsync list and watch
// EndpointSlices with it, so both see the same ones.
const HandWrittenSlices = discoveryv1.LabelManagedBy + "!=endpointslice-controller.k8s.io"

// Selects reports whether svc's selector selects pod: the same namespace, a
// selector that is not empty, and every one of its labels on the Pod with
// the same value. A Service without a selector selects no Pod (its
// endpoints are managed by hand: see Chooses). It ignores the Pod's phase,
// so a controller can also map a Pod that just finished to its Services.
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

// Chooses reports whether pod is a backend of svc: svc's selector selects
// it (Selects) or, when svc has no selector, one of slices that belongs to
// svc (SliceService, same namespace) has an endpoint whose targetRef is the
// Pod (kind Pod, the Pod's name, and its UID when the reference has one).
// slices may hold other Services' slices; they are ignored. Like Selects it
// ignores the Pod's phase and readiness.
func Chooses(svc *corev1.Service, pod *corev1.Pod, slices []*discoveryv1.EndpointSlice) bool {
	if svc == nil || pod == nil || pod.Namespace != svc.Namespace {
		return false
	}
	if len(svc.Spec.Selector) > 0 {
		return Selects(svc, pod)
	}
	for _, s := range slices {
		if s == nil || s.Namespace != svc.Namespace || SliceService(s) != svc.Name {
			continue
		}
		for _, e := range s.Endpoints {
			if refersTo(e.TargetRef, pod) {
				return true
			}
		}
	}
	return false
}

func refersTo(ref *corev1.ObjectReference, pod *corev1.Pod) bool {
	return podName(ref, pod.Namespace) == pod.Name && (ref.UID == "" || ref.UID == pod.UID)
}

// podName is the name of the Pod ref references in namespace ns (a ref
// without a namespace is in ns), "" when it references no Pod there.
func podName(ref *corev1.ObjectReference, ns string) string {
	if ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != ns) {
		return ""
	}
	return ref.Name
}

// SliceService is the name of the Service an EndpointSlice belongs to (its
// label kubernetes.io/service-name), "" when it has none.
func SliceService(s *discoveryv1.EndpointSlice) string {
	if s == nil {
		return ""
	}
	return s.Labels[discoveryv1.LabelServiceName]
}

// SlicePods returns the names of the Pods an EndpointSlice's endpoints
// reference by targetRef (kind Pod, in the slice's namespace), sorted,
// without duplicates: the Pods whose backends change with the slice.
func SlicePods(s *discoveryv1.EndpointSlice) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, e := range s.Endpoints {
		if name := podName(e.TargetRef, s.Namespace); name != "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
