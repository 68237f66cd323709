package lbsync

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// TestLBSync_poolsFromAnnotations: members come from the annotation entries
// whose podPort is the resolved (named) targetPort and whose protocol
// matches; Antrea's format without ipFamily is read the same; not-Ready
// Pods are left out; multi-port Services get a pool per port; the VIP and
// the Synced condition land in the status.
func TestLBSync_poolsFromAnnotations(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip0, 61000, "tcp"), lbsyncbed.Entry(5353, ip0, 61001, "udp"), lbsyncbed.Entry(5353, ip0, 61002, "tcp")))
	// Antrea before v2.6: no ipFamily, and an entry for a port no Service targets.
	e.Pod(t, ns, "b", e.NodeName(1), `[{"podPort":8080,"nodeIP":"`+ip1+`","nodePort":61010,"protocol":"tcp"},{"podPort":9999,"nodeIP":"`+ip1+`","nodePort":61011,"protocol":"tcp"}]`)
	e.Pod(t, ns, "notready", e.NodeName(1), lbsyncbed.List(lbsyncbed.Entry(8080, ip1, 61020, "tcp")), func(p *corev1.Pod) {
		p.Annotations["test.npl.io/ready"] = "false"
	})
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass,
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
	))
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{
		e.NPL.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(ip0, 61000, true), lbsyncbed.Member(ip1, 61010, true)},
		e.NPL.PoolName(ns, "web", lbmodel.UDP, 53): {lbsyncbed.Member(ip0, 61001, true)},
	})

	var svc *corev1.Service
	lbsyncbed.WaitFor(t, 20*time.Second, "VIP in the status and the Synced condition", func() (bool, error) {
		svc = e.Service(t, ns, "web")
		c := lbsyncbed.Condition(svc)
		return len(svc.Status.LoadBalancer.Ingress) == 1 && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	_, vips, _, _ := lbsyncbed.Pools(e.NPL, ns, "web")
	if got := svc.Status.LoadBalancer.Ingress[0].IP; len(vips) != 1 || got != vips[0] {
		t.Errorf("status VIP %s, provider VIPs %v", got, vips)
	}
	if svc.Annotations[contract.ServiceEnabledKey] != "true" || svc.Annotations[contract.AutoAnnotatedKey] != "true" {
		t.Errorf("service not auto-annotated: %v", svc.Annotations)
	}
	if !claim.HasFinalizer(svc) {
		t.Errorf("no cleanup finalizer: %v", svc.Finalizers)
	}

	// Readiness flips membership both ways.
	e.SetReady(t, ns, "notready", true)
	e.SetReady(t, ns, "a", false)
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{
		e.NPL.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(ip1, 61010, true), lbsyncbed.Member(ip1, 61020, true)},
		e.NPL.PoolName(ns, "web", lbmodel.UDP, 53): {},
	})

	// An annotation that disappears takes its members away at once.
	e.Annotate(t, ns, "b", "")
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{
		e.NPL.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(ip1, 61020, true)},
		e.NPL.PoolName(ns, "web", lbmodel.UDP, 53): {},
	})
}

// TestLBSync_classSelection: only Services of our class (or none, when we
// are the default, which this configuration is not) are served.
func TestLBSync_classSelection(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "noclass", nil))
	e.CreateService(t, lbsyncbed.LBService(ns, "other", ptr.To("example.com/lb")))
	e.CreateService(t, lbsyncbed.LBService(ns, "ours", lbsyncbed.OurClass))
	lbsyncbed.WaitPools(t, e.NPL, ns, "ours", map[string][]lbmodel.Member{
		e.NPL.PoolName(ns, "ours", lbmodel.TCP, 80): {lbsyncbed.Member(e.NodeIP(0), 61000, true)},
	})
	// The other two were synced (a claim, a provider call and a status
	// write would show now) once a sync begun after a later change of each
	// is done.
	e.SyncedAfter(t, "services", ns, "noclass", e.NPL)
	e.SyncedAfter(t, "services", ns, "other", e.NPL)
	for _, name := range []string{"noclass", "other"} {
		if _, _, ok, err := lbsyncbed.Pools(e.NPL, ns, name); ok || err != nil {
			t.Errorf("service %s got a load balancer (err %v)", name, err)
		}
		s := e.Service(t, ns, name)
		if s.Annotations[contract.ServiceEnabledKey] != "" || len(s.Finalizers) != 0 || len(s.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("service %s was touched: annotations %v finalizers %v status %v", name, s.Annotations, s.Finalizers, s.Status)
		}
	}
}

// TestLBSync_releaseWhenNoLongerOurs: changing the type removes the load
// balancer, the status, the finalizer and the opt-in we added, but a user's
// own opt-in stays.
func TestLBSync_releaseWhenNoLongerOurs(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "auto", lbsyncbed.OurClass))
	user := lbsyncbed.LBService(ns, "user", lbsyncbed.OurClass)
	user.Annotations = map[string]string{contract.ServiceEnabledKey: "true"}
	e.CreateService(t, user)
	for _, name := range []string{"auto", "user"} {
		lbsyncbed.WaitFor(t, 20*time.Second, name+" synced", func() (bool, error) {
			return len(e.Service(t, ns, name).Status.LoadBalancer.Ingress) == 1, nil
		})
	}
	if e.Service(t, ns, "user").Annotations[contract.AutoAnnotatedKey] != "" {
		t.Error("a user's own opt-in was marked as auto-annotated")
	}
	for _, name := range []string{"auto", "user"} {
		e.UpdateService(t, ns, name, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Spec.LoadBalancerClass = nil
			for i := range s.Spec.Ports {
				s.Spec.Ports[i].NodePort = 0
			}
			s.Spec.AllocateLoadBalancerNodePorts = nil
		})
	}
	for _, name := range []string{"auto", "user"} {
		lbsyncbed.WaitFor(t, 20*time.Second, name+" released", func() (bool, error) {
			_, _, ok, err := lbsyncbed.Pools(e.NPL, ns, name)
			s := e.Service(t, ns, name)
			return err == nil && !ok && len(s.Finalizers) == 0 && len(s.Status.LoadBalancer.Ingress) == 0 && lbsyncbed.Condition(s) == nil, nil
		})
	}
	if s := e.Service(t, ns, "auto"); s.Annotations[contract.ServiceEnabledKey] != "" || s.Annotations[contract.AutoAnnotatedKey] != "" {
		t.Errorf("our opt-in was not removed: %v", s.Annotations)
	}
	if s := e.Service(t, ns, "user"); s.Annotations[contract.ServiceEnabledKey] != "true" {
		t.Errorf("the user's opt-in was removed: %v", s.Annotations)
	}
}

// TestLBSync_requestedVIPAndFinalizerCleanup: spec.loadBalancerIP is the
// VIP; deleting the Service waits for the load balancer to be deleted.
func TestLBSync_requestedVIPAndFinalizerCleanup(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	s := lbsyncbed.LBService(ns, "fixed", lbsyncbed.OurClass)
	s.Spec.LoadBalancerIP = "198.18.100.9"
	e.CreateService(t, s)
	lbsyncbed.WaitFor(t, 20*time.Second, "requested VIP in the status", func() (bool, error) {
		in := e.Service(t, ns, "fixed").Status.LoadBalancer.Ingress
		return len(in) == 1 && in[0].IP == "198.18.100.9", nil
	})
	if err := e.Client.CoreV1().Services(ns).Delete(context.Background(), "fixed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 20*time.Second, "service and load balancer gone", func() (bool, error) {
		_, err := e.Client.CoreV1().Services(ns).Get(context.Background(), "fixed", metav1.GetOptions{})
		_, _, ok, perr := lbsyncbed.Pools(e.NPL, ns, "fixed")
		return err != nil && perr == nil && !ok, nil
	})
}

// TestLBSync_terminatingPodDrains: a terminating Pod stays as a disabled
// member until it is gone.
func TestLBSync_terminatingPodDrains(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	ip := e.NodeIP(0)
	e.Pod(t, ns, "stay", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.Pod(t, ns, "leave", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61001, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	pool := e.NPL.PoolName(ns, "web", lbmodel.TCP, 80)
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, true)}})
	if err := e.Client.CoreV1().Pods(ns).Delete(context.Background(), "leave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cluster keeps a deleted Pod for 4 s (TerminationDelay).
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, false)}})
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true)}})
}

// TestLBSync_collidingNamesGetTheirOwnLoadBalancers: the Services
// <ns>-a/x and <ns>/a-x had one load balancer, <cluster>--<ns>-a-x: the
// second's Ensure took the first's VIP and members, and deleting it left
// the first with none (REFERENCE 17). Each now has its own name, VIP and
// members, and deleting one leaves the other as it was.
func TestLBSync_collidingNamesGetTheirOwnLoadBalancers(t *testing.T) {
	e := lbsyncbed.Setup(t)
	team := e.Namespace(t)
	teamA := team + "-a"
	ctx := lbsyncbed.Context(t, 30*time.Second)
	if _, err := e.Cluster.CreateNamespace(ctx, teamA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.CoreV1().Namespaces().Delete(context.Background(), teamA, metav1.DeleteOptions{}) })
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	e.Pod(t, teamA, "x-1", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip0, 61000, "tcp")))
	e.Pod(t, team, "ax-1", e.NodeName(1), lbsyncbed.List(lbsyncbed.Entry(8080, ip1, 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(teamA, "x", lbsyncbed.OurClass))
	e.CreateService(t, lbsyncbed.LBService(team, "a-x", lbsyncbed.OurClass))
	victim := map[string][]lbmodel.Member{e.NPL.PoolName(teamA, "x", lbmodel.TCP, 80): {lbsyncbed.Member(ip0, 61000, true)}}
	lbsyncbed.WaitPools(t, e.NPL, teamA, "x", victim)
	lbsyncbed.WaitPools(t, e.NPL, team, "a-x", map[string][]lbmodel.Member{
		e.NPL.PoolName(team, "a-x", lbmodel.TCP, 80): {lbsyncbed.Member(ip1, 61000, true)}})
	_, victimVIPs, _, _ := lbsyncbed.Pools(e.NPL, teamA, "x")
	_, otherVIPs, _, _ := lbsyncbed.Pools(e.NPL, team, "a-x")
	if len(victimVIPs) != 1 || len(otherVIPs) != 1 || victimVIPs[0] == otherVIPs[0] {
		t.Errorf("VIPs %v and %v: want one each, distinct", victimVIPs, otherVIPs)
	}
	if err := e.Client.CoreV1().Services(team).Delete(ctx, "a-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 20*time.Second, "the load balancer of "+team+"/a-x gone", func() (bool, error) {
		_, _, ok, err := lbsyncbed.Pools(e.NPL, team, "a-x")
		return !ok, err
	})
	lbsyncbed.WaitPools(t, e.NPL, teamA, "x", victim)
	if _, vips, _, _ := lbsyncbed.Pools(e.NPL, teamA, "x"); len(vips) != 1 || vips[0] != victimVIPs[0] {
		t.Errorf("%s/x's VIPs after %s/a-x went: %v, want %v", teamA, team, vips, victimVIPs)
	}
}
