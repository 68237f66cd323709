package inputs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func names[T metav1.Object](objs []T) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	return out
}

// TestStore_selectorlessServiceChoosesPodsThroughItsEndpointSlices: the
// Store finds a selectorless Service's Pods through its slices' targetRefs,
// and the Services of a Pod named by one, beside the selector path.
func TestStore_selectorlessServiceChoosesPodsThroughItsEndpointSlices(t *testing.T) {
	s := Store{
		Services:       cache.NewIndexer(cache.MetaNamespaceKeyFunc, ServiceIndexers()),
		Pods:           cache.NewIndexer(cache.MetaNamespaceKeyFunc, PodIndexers()),
		EndpointSlices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, EndpointSliceIndexers()),
	}
	add := func(idx cache.Indexer, obj any) {
		if err := idx.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	manual := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "manual"}}
	selected := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "selected"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "a"}}}
	add(s.Services, manual)
	add(s.Services, selected)
	for _, name := range []string{"a", "b", "c"} {
		add(s.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": name}}})
	}
	ref := func(name string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: name}}
	}
	add(s.EndpointSlices, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "manual-1", Labels: map[string]string{discoveryv1.LabelServiceName: "manual"}},
		Endpoints:  []discoveryv1.Endpoint{ref("a"), ref("b"), ref("gone")},
	})
	add(s.EndpointSlices, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "selected-x", Labels: map[string]string{discoveryv1.LabelServiceName: "selected"}},
		Endpoints:  []discoveryv1.Endpoint{ref("c")},
	})

	if diff := cmp.Diff([]string{"a", "b"}, names(s.PodsFor(manual))); diff != "" {
		t.Errorf("PodsFor(manual) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, names(s.PodsFor(selected))); diff != "" {
		t.Errorf("PodsFor(selected): a selector ignores slices (-want +got):\n%s", diff)
	}
	pod := func(name string) *corev1.Pod {
		obj, _, _ := s.Pods.GetByKey("ns/" + name)
		return obj.(*corev1.Pod)
	}
	if diff := cmp.Diff([]string{"manual", "selected"}, names(s.ServicesSelecting(pod("a")))); diff != "" {
		t.Errorf("ServicesSelecting(a) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{}, names(s.ServicesSelecting(pod("c")))); diff != "" {
		t.Errorf("ServicesSelecting(c) (-want +got):\n%s", diff)
	}
	in := s.ServiceInput(Settings{ClusterName: "c1"}, manual)
	if diff := cmp.Diff([]string{"manual-1"}, names(in.EndpointSlices)); diff != "" {
		t.Errorf("ServiceInput(manual).EndpointSlices (-want +got):\n%s", diff)
	}
}
