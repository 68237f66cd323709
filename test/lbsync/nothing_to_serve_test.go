package lbsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// TestLBSync_nothingToServeLeavesTheLoadBalancer: a LoadBalancer Service
// whose only port is SCTP builds a model with no listener. It reaches no
// provider: the Service gets a Warning Event and a False condition naming
// the skipped port; a load balancer it had keeps its pools and VIP, and a
// new Service gets none.
func TestLBSync_nothingToServeLeavesTheLoadBalancer(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	e.Pod(t, ns, "web-1", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61011, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	pool := e.NPL.PoolName(ns, "web", lbmodel.TCP, 80)
	want := map[string][]lbmodel.Member{pool: {lbsyncbed.Member(e.NodeIP(0), 61011, true)}}
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", want)
	var vip string
	lbsyncbed.WaitFor(t, 20*time.Second, "the VIP in the status", func() (bool, error) {
		s := e.Service(t, ns, "web")
		if len(s.Status.LoadBalancer.Ingress) == 1 {
			vip = s.Status.LoadBalancer.Ingress[0].IP
		}
		return vip != "", nil
	})

	sctp := corev1.ServicePort{Name: "sig", Port: 9000, Protocol: corev1.ProtocolSCTP}
	e.UpdateService(t, ns, "web", func(s *corev1.Service) { s.Spec.Ports = []corev1.ServicePort{sctp} })
	e.CreateService(t, lbsyncbed.LBService(ns, "sctp-only", lbsyncbed.OurClass, sctp))

	for _, name := range []string{"web", "sctp-only"} {
		lbsyncbed.WaitFor(t, 20*time.Second, "condition NothingToServe on "+name, func() (bool, error) {
			c := lbsyncbed.Condition(e.Service(t, ns, name))
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "NothingToServe" &&
				strings.Contains(c.Message, "9000/SCTP"), nil
		})
		lbsyncbed.WaitFor(t, 20*time.Second, "a Warning Event NothingToServe on "+name, func() (bool, error) {
			evs, err := e.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
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
	got, vips, ok, err := lbsyncbed.Pools(e.NPL, ns, "web")
	if err != nil || !ok {
		t.Fatalf("load balancer of web after its ports became SCTP only: present %v, %v; want kept", ok, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pools of web changed (-want +got):\n%s", diff)
	}
	if !cmp.Equal(vips, []string{vip}) {
		t.Errorf("VIPs of web = %v; want %v kept", vips, vip)
	}
	if s := e.Service(t, ns, "web"); len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP != vip {
		t.Errorf("status of web = %v; want the VIP %s kept", s.Status.LoadBalancer.Ingress, vip)
	}
	if _, _, ok, err := lbsyncbed.Pools(e.NPL, ns, "sctp-only"); ok || err != nil {
		t.Errorf("load balancer of sctp-only: present %v, %v; want none", ok, err)
	}
}
