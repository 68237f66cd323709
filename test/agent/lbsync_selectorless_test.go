package agent

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestLBSync_selectorlessServiceFollowsEndpointSliceTargetRefs: the pool
// of a LoadBalancer Service without a selector holds the node ports of the
// Pods its hand-written EndpointSlice names, and follows the slice.
func TestLBSync_selectorlessServiceFollowsEndpointSliceTargetRefs(t *testing.T) {
	forEachDatapath(t, func(t *testing.T, e *env) {
		_, backend, cluster := e.lbsyncFor(t, "mock", netip.MustParsePrefix("198.18.126.0/28"))
		ns := e.namespace(t)
		ctx := ctxFor(t, 2*time.Minute)
		pods := map[string]*corev1.Pod{}
		for i, name := range []string{"web-0", "web-1"} {
			pods[name] = e.createPod(t, webPod(ns, name, fmt.Sprintf("npl-node-%d", i), map[string]string{"app": "manual"}))
		}
		class := "npl.io/mock"
		e.createService(t, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
		})
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "web-manual", Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "test.npl.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		for _, name := range []string{"web-0", "web-1"} {
			p := e.waitPodIP(t, ns, name)
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: pods[name].UID}})
		}
		slices := e.client.DiscoveryV1().EndpointSlices(ns)
		if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		lbName := lbmodel.LoadBalancerName(cluster, ns, "web")
		pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)
		member := func(name string) lbmodel.Member {
			es := e.waitEntries(t, ns, name, 1)
			return lbmodel.Member{IP: es[0].NodeIP, Port: int32(es[0].NodePort), Enabled: true}
		}
		waitPool := func(want ...lbmodel.Member) {
			t.Helper()
			waitFor(t, 30*time.Second, fmt.Sprintf("pool %s with %v", pool, want), func() (bool, error) {
				got, _, ok, err := backend.Pools(lbName)
				return ok && err == nil && sameMembers(got[pool], want), err
			})
		}
		m0, m1 := member("web-0"), member("web-1")
		waitPool(m0, m1)
		for _, m := range []lbmodel.Member{m0, m1} {
			if _, err := get(addr(m.IP, int(m.Port))); err != nil {
				t.Errorf("member %s:%d: %v", m.IP, m.Port, err)
			}
		}

		cur, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Endpoints = cur.Endpoints[1:] // web-1 only
		if _, err := slices.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPool(m1)
	})
}
