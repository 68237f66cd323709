package lbsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// TestLBSync_nothingToServeLeavesTheLoadBalancer: a LoadBalancer Service
// whose only port is SCTP builds a model with no listener. It reaches no
// provider: the Service gets a Warning Event and a False condition naming
// the skipped port; a load balancer it had keeps its pools and VIP, and a
// new Service gets none.
func TestLBSync_nothingToServeLeavesTheLoadBalancer(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	e.pod(t, ns, "web-1", e.nodeName(0), list(entry(8080, e.nodeIP(0), 61011, "tcp")))
	e.createService(t, lbService(ns, "web", ourClass))
	pool := e.npl.poolName(ns, "web", lbmodel.TCP, 80)
	want := map[string][]lbmodel.Member{pool: {member(e.nodeIP(0), 61011, true)}}
	waitPools(t, e.npl, ns, "web", want)
	var vip string
	waitFor(t, 20*time.Second, "the VIP in the status", func() (bool, error) {
		s := e.service(t, ns, "web")
		if len(s.Status.LoadBalancer.Ingress) == 1 {
			vip = s.Status.LoadBalancer.Ingress[0].IP
		}
		return vip != "", nil
	})

	sctp := corev1.ServicePort{Name: "sig", Port: 9000, Protocol: corev1.ProtocolSCTP}
	e.updateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Ports = []corev1.ServicePort{sctp} })
	e.createService(t, lbService(ns, "sctp-only", ourClass, sctp))

	for _, name := range []string{"web", "sctp-only"} {
		waitFor(t, 20*time.Second, "condition NothingToServe on "+name, func() (bool, error) {
			c := condition(e.service(t, ns, name))
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "NothingToServe" &&
				strings.Contains(c.Message, "9000/SCTP"), nil
		})
		waitFor(t, 20*time.Second, "a Warning Event NothingToServe on "+name, func() (bool, error) {
			evs, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if ev.Reason == "NothingToServe" && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, "9000/SCTP") {
					return true, nil
				}
			}
			return false, nil
		})
	}

	// The condition was written after the model was rejected, so the
	// provider state now is what it will stay: the old load balancer as it
	// was, and none for the new Service.
	got, vips, ok, err := pools(e.npl, ns, "web")
	if err != nil || !ok {
		t.Fatalf("load balancer of web after its ports became SCTP only: present %v, %v; want kept", ok, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pools of web changed (-want +got):\n%s", diff)
	}
	if !cmp.Equal(vips, []string{vip}) {
		t.Errorf("VIPs of web = %v; want %v kept", vips, vip)
	}
	if s := e.service(t, ns, "web"); len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP != vip {
		t.Errorf("status of web = %v; want the VIP %s kept", s.Status.LoadBalancer.Ingress, vip)
	}
	if _, _, ok, err := pools(e.npl, ns, "sctp-only"); ok || err != nil {
		t.Errorf("load balancer of sctp-only: present %v, %v; want none", ok, err)
	}
}
