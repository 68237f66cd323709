package controller

import (
	corev1 "k8s.io/api/core/v1"
)

const (
	// selectorIndex indexes Services by each term of their selector.
	selectorIndex = "selectorTerm"
	// labelIndex indexes Pods by each of their labels.
	labelIndex = "labelTerm"
)

// term is an index value: one label key=value in a namespace.
func term(namespace, key, value string) string {
	return namespace + "/" + key + "=" + value
}

func serviceSelectorTerms(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(svc.Spec.Selector))
	for k, v := range svc.Spec.Selector {
		out = append(out, term(svc.Namespace, k, v))
	}
	return out, nil
}

func podLabelTerms(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(pod.Labels))
	for k, v := range pod.Labels {
		out = append(out, term(pod.Namespace, k, v))
	}
	return out, nil
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
