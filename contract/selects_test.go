package contract

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func slice(ns, svc string, refs ...*corev1.ObjectReference) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, r := range refs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.19.0.2"}, TargetRef: r})
	}
	return s
}

func podRef(name string, uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Name: name, UID: uid}
}

func TestChooses(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1", UID: "u1", Labels: map[string]string{"app": "a"}}}
	withSelector := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sel"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "a"}}}
	noSelector := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "manual"}}
	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   bool
	}{
		{"a selector decides alone", withSelector, nil, true},
		{"a selector wins over slices that name other Pods", &corev1.Service{ObjectMeta: withSelector.ObjectMeta, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "b"}}},
			[]*discoveryv1.EndpointSlice{slice("ns", "sel", podRef("p1", ""))}, false},
		{"no selector, no slice: no Pod", noSelector, nil, false},
		{"no selector: the slice's targetRef chooses the Pod", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "manual", podRef("other", ""), podRef("p1", ""))}, true},
		{"targetRef with the Pod's UID", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "manual", podRef("p1", "u1"))}, true},
		{"targetRef with another UID: a Pod of the same name before", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "manual", podRef("p1", "old"))}, false},
		{"targetRef of another kind", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "manual", &corev1.ObjectReference{Kind: "Node", Name: "p1"})}, false},
		{"endpoint without targetRef", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "manual", nil)}, false},
		{"slice of another Service", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "other", podRef("p1", ""))}, false},
		{"slice of another namespace", noSelector, []*discoveryv1.EndpointSlice{slice("ns2", "manual", podRef("p1", ""))}, false},
		{"targetRef into another namespace", noSelector, []*discoveryv1.EndpointSlice{slice("ns", "manual", &corev1.ObjectReference{Kind: "Pod", Namespace: "ns2", Name: "p1"})}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Chooses(tt.svc, pod, tt.slices); got != tt.want {
				t.Errorf("Chooses() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSlicePods_sortedUniquePodsOfTheNamespace(t *testing.T) {
	s := slice("ns", "svc", podRef("b", ""), podRef("a", ""), podRef("b", "x"), nil,
		&corev1.ObjectReference{Kind: "Node", Name: "n"}, &corev1.ObjectReference{Kind: "Pod", Namespace: "other", Name: "c"})
	if diff := cmp.Diff([]string{"a", "b"}, SlicePods(s)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := SliceService(s); got != "svc" {
		t.Errorf("SliceService = %q, want svc", got)
	}
}
