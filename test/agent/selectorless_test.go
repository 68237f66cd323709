package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestAgent_selectorlessServiceFollowsEndpointSliceTargetRefs: a Service
// without a selector publishes the Pods its hand-written EndpointSlice names
// by targetRef (as Gateway API's HTTPRouteServiceTypes writes them), follows
// the slice as it changes and unpublishes when it goes; a headless Service
// with a selector publishes its Pods as any other.
func TestAgent_selectorlessServiceFollowsEndpointSliceTargetRefs(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		ns := e.namespace(t)
		ctx := ctxFor(t, 2*time.Minute)
		manual := map[string]string{"app": "manual"}
		pods := map[string]*corev1.Pod{}
		for _, name := range []string{"web-0", "web-1"} {
			pods[name] = e.createPod(t, webPod(ns, name, node0, manual))
		}
		e.createService(t, npService(ns, "web", nil))
		slices := e.client.DiscoveryV1().EndpointSlices(ns)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "web-manual", Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "test.npl.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		setEndpoint := func(s *discoveryv1.EndpointSlice, name string) {
			p := e.waitPodIP(t, ns, name)
			s.Endpoints = []discoveryv1.Endpoint{{
				Addresses:  []string{p.Status.PodIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: pods[name].UID},
			}}
		}
		setEndpoint(slice, "web-0")
		if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		got := e.waitEntries(t, ns, "web-0", 1)[0]
		target := addr(got.NodeIP, got.NodePort)
		eventually(t, 10*time.Second, "traffic to "+target, func() error { return expectBody(get(target))("web-0") })
		if _, ok, _ := e.entries(t, ns, "web-1"); ok {
			t.Errorf("web-1, which no EndpointSlice names, has a node port")
		}

		cur, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setEndpoint(cur, "web-1")
		if _, err := slices.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got = e.waitEntries(t, ns, "web-1", 1)[0]
		e.waitNoAnnotation(t, ns, "web-0")
		target = addr(got.NodeIP, got.NodePort)
		eventually(t, 10*time.Second, "traffic to "+target, func() error { return expectBody(get(target))("web-1") })

		if err := slices.Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitNoAnnotation(t, ns, "web-1")

		headless := npService(ns, "headless", map[string]string{"app": "headless"})
		headless.Spec.ClusterIP = corev1.ClusterIPNone
		e.createPod(t, webPod(ns, "web-2", node0, map[string]string{"app": "headless"}))
		e.createService(t, headless)
		got = e.waitEntries(t, ns, "web-2", 1)[0]
		target = addr(got.NodeIP, got.NodePort)
		eventually(t, 10*time.Second, "traffic to "+target, func() error { return expectBody(get(target))("web-2") })
	})
}

// waitPodIP waits until the Pod has an IP and returns it.
func (e *env) waitPodIP(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, 30*time.Second, "an IP on pod "+ns+"/"+name, func() (bool, error) {
		p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		pod = p
		return err == nil && p.Status.PodIP != "", err
	})
	return pod
}
