package lbsync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// What a namespace user can do to the load balancers others share: each
// test is one attack a security review tried (docs/design.md, Tenant
// isolation).

var httpPort = corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}

// waitEvent waits for a Warning Event of reason on the object kind/name
// of ns whose message holds want.
func waitEvent(t *testing.T, e *lbsyncbed.Env, ns, kind, name, reason, want string) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}.String()
	var seen []string
	lbsyncbed.WaitFor(t, 20*time.Second, fmt.Sprintf("a %s Event on %s %s saying %q", reason, kind, name, want), func() (bool, error) {
		evs, err := e.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			seen = append(seen, ev.Message)
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestHostile_forgedAnnotationIsNoMember: a tenant writes its own Pod's
// nodeportlocal.antrea.io annotation (it may patch its Pods) with the cloud
// metadata service, the node's loopback ssh, another node's address and a
// port outside npl-agent's range: only the entry npl-agent could have
// written becomes a member, and the Pod gets a Warning Event per forged
// entry.
func TestHostile_forgedAnnotationIsNoMember(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	e.Pod(t, ns, "honest", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip0, 61000, "tcp")))
	e.Pod(t, ns, "forged", e.NodeName(0), lbsyncbed.List(
		lbsyncbed.Entry(8080, "169.254.169.254", 80, "tcp"),
		lbsyncbed.Entry(8080, "127.0.0.1", 22, "tcp"),
		lbsyncbed.Entry(8080, ip1, 61001, "tcp"),
		lbsyncbed.Entry(8080, ip0, 22, "tcp"),
	))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass, httpPort))
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{
		e.NPL.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(ip0, 61000, true)},
	})
	for _, want := range []string{
		"169.254.169.254:80 (Pod port 8080/tcp): node port 80 is outside npl-agent's range",
		"127.0.0.1:22 (Pod port 8080/tcp): node port 22 is outside",
		ip1 + ":61001 (Pod port 8080/tcp): " + ip1 + " is not an address of the Pod's node " + e.NodeName(0),
		ip0 + ":22 (Pod port 8080/tcp): node port 22 is outside",
	} {
		waitEvent(t, e, ns, "Pod", "forged", "UntrustedNodePortEntry", want)
	}
}

// TestHostile_vipsFromWhereTheOperatorAllows: a Service may not take the
// unspecified or a loopback address (HAProxy bound 0.0.0.0:8443, every
// address of the edge), an address outside the VIP ranges, nor a VIP and
// port another Service is served on; the Service reads False with the
// reason and a Warning Event, and the load balancer it had stays as it was.
func TestHostile_vipsFromWhereTheOperatorAllows(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	ip0 := e.NodeIP(0)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip0, 61000, "tcp")))
	victim := lbsyncbed.LBService(ns, "victim", lbsyncbed.OurClass, httpPort)
	victim.Spec.LoadBalancerIP = "198.18.100.10"
	e.CreateService(t, victim)
	e.CreateService(t, lbsyncbed.LBService(ns, "evil", lbsyncbed.OurClass, httpPort))
	var evilVIP string
	lbsyncbed.WaitFor(t, 20*time.Second, "both Services served", func() (bool, error) {
		v, x := e.Service(t, ns, "victim").Status.LoadBalancer.Ingress, e.Service(t, ns, "evil").Status.LoadBalancer.Ingress
		if len(v) != 1 || len(x) != 1 {
			return false, nil
		}
		evilVIP = x[0].IP
		return v[0].IP == "198.18.100.10", nil
	})
	for _, c := range []struct{ vip, reason, want string }{
		{"0.0.0.0", "VIPNotAllowed", "requested VIP 0.0.0.0 is not in the ranges"},
		{"127.0.0.1", "VIPNotAllowed", "requested VIP 127.0.0.1 is not in the ranges"},
		{"198.18.200.7", "VIPNotAllowed", "requested VIP 198.18.200.7 is not in the ranges"},
		{"198.18.100.10", "VIPInUse", "requested VIP 198.18.100.10 is already served on TCP/80"},
	} {
		t.Run(c.vip, func(t *testing.T) {
			e.UpdateService(t, ns, "evil", func(s *corev1.Service) {
				if s.Annotations == nil {
					s.Annotations = map[string]string{}
				}
				s.Annotations[contract.LoadBalancerIPKey] = c.vip
			})
			lbsyncbed.WaitFor(t, 20*time.Second, "evil's condition False "+c.reason, func() (bool, error) {
				cond := lbsyncbed.Condition(e.Service(t, ns, "evil"))
				return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == c.reason && strings.Contains(cond.Message, c.want), nil
			})
			waitEvent(t, e, ns, "Service", "evil", c.reason, c.want)
			for svc, want := range map[string]string{"evil": evilVIP, "victim": "198.18.100.10"} {
				_, vips, ok, err := lbsyncbed.Pools(e.NPL, ns, svc)
				if err != nil || !ok || len(vips) != 1 || vips[0] != want {
					t.Errorf("%s's load balancer: VIPs %v (found %t, %v), want it as it was on %s", svc, vips, ok, err, want)
				}
			}
		})
	}
}
