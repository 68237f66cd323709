package controller

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodeportlocal/npl/contract"
)

// TrimPod keeps only what the agent reads of a Pod, to bound the memory of
// its cache: what contract.TrimPod keeps, and host networking.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := contract.TrimPod(pod)
	out.Spec.HostNetwork = pod.Spec.HostNetwork
	return out, nil
}

// TrimService keeps what decides the opt-in and the ports of a Service.
func TrimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{}
	out.TypeMeta = svc.TypeMeta
	out.Name, out.Namespace, out.UID, out.ResourceVersion = svc.Name, svc.Namespace, svc.UID, svc.ResourceVersion
	if v, ok := svc.Annotations[contract.ServiceEnabledKey]; ok {
		out.Annotations = map[string]string{contract.ServiceEnabledKey: v}
	}
	out.Spec.Type = svc.Spec.Type
	out.Spec.Selector = svc.Spec.Selector
	out.Spec.Ports = svc.Spec.Ports
	out.Spec.IPFamilies = svc.Spec.IPFamilies
	return out, nil
}

// TrimEndpointSlice keeps what chooses Pods: the Service label and the
// endpoints' targetRefs.
func TrimEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = s.Name, s.Namespace, s.UID, s.ResourceVersion
	if v, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: v}
	}
	for _, e := range s.Endpoints {
		if e.TargetRef != nil {
			out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{TargetRef: e.TargetRef})
		}
	}
	return out, nil
}

// TrimNode keeps the Node's name and addresses.
func TrimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{}
	out.Name, out.UID, out.ResourceVersion = node.Name, node.UID, node.ResourceVersion
	out.Status.Addresses = node.Status.Addresses
	return out, nil
}

// serviceChangeMatters reports whether a Service update can change any
// Pod's mappings: opt-in, type, selector, ports or IP families.
func serviceChangeMatters(old, cur *corev1.Service) bool {
	if contract.ServiceEnabled(old.Annotations) != contract.ServiceEnabled(cur.Annotations) || old.Spec.Type != cur.Spec.Type {
		return true
	}
	if !maps.Equal(old.Spec.Selector, cur.Spec.Selector) || len(old.Spec.Ports) != len(cur.Spec.Ports) ||
		!slices.Equal(old.Spec.IPFamilies, cur.Spec.IPFamilies) {
		return true
	}
	for i := range old.Spec.Ports {
		if old.Spec.Ports[i] != cur.Spec.Ports[i] {
			return true
		}
	}
	return false
}
