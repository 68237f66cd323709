package lbsync

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/claim"
)

// TestLBSync_poolsFromAnnotations: members come from the annotation entries
// whose podPort is the resolved (named) targetPort and whose protocol
// matches; Antrea's format without ipFamily is read the same; not-Ready
// Pods are left out; multi-port Services get a pool per port; the VIP and
// the Synced condition land in the status.
func TestLBSync_poolsFromAnnotations(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	ip0, ip1 := e.nodeIP(0), e.nodeIP(1)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, ip0, 61000, "tcp"), entry(5353, ip0, 61001, "udp"), entry(5353, ip0, 61002, "tcp")))
	// Antrea before v2.6: no ipFamily, and an entry for a port no Service targets.
	e.pod(t, ns, "b", e.nodeName(1), `[{"podPort":8080,"nodeIP":"`+ip1+`","nodePort":61010,"protocol":"tcp"},{"podPort":9999,"nodeIP":"`+ip1+`","nodePort":61011,"protocol":"tcp"}]`)
	e.pod(t, ns, "notready", e.nodeName(1), list(entry(8080, ip1, 61020, "tcp")), func(p *corev1.Pod) {
		p.Annotations["test.npl.io/ready"] = "false"
	})
	e.createService(t, lbService(ns, "web", ourClass,
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
	))
	waitPools(t, e.npl, ns, "web", map[string][]lbmodel.Member{
		e.npl.poolName(ns, "web", lbmodel.TCP, 80): {member(ip0, 61000, true), member(ip1, 61010, true)},
		e.npl.poolName(ns, "web", lbmodel.UDP, 53): {member(ip0, 61001, true)},
	})

	var svc *corev1.Service
	waitFor(t, 20*time.Second, "VIP in the status and the Synced condition", func() (bool, error) {
		svc = e.service(t, ns, "web")
		c := condition(svc)
		return len(svc.Status.LoadBalancer.Ingress) == 1 && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	_, vips, _, _ := pools(e.npl, ns, "web")
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
	e.setReady(t, ns, "notready", true)
	e.setReady(t, ns, "a", false)
	waitPools(t, e.npl, ns, "web", map[string][]lbmodel.Member{
		e.npl.poolName(ns, "web", lbmodel.TCP, 80): {member(ip1, 61010, true), member(ip1, 61020, true)},
		e.npl.poolName(ns, "web", lbmodel.UDP, 53): {},
	})

	// An annotation that disappears takes its members away at once.
	e.annotate(t, ns, "b", "")
	waitPools(t, e.npl, ns, "web", map[string][]lbmodel.Member{
		e.npl.poolName(ns, "web", lbmodel.TCP, 80): {member(ip1, 61020, true)},
		e.npl.poolName(ns, "web", lbmodel.UDP, 53): {},
	})
}

// TestLBSync_classSelection: only Services of our class (or none, when we
// are the default, which this configuration is not) are served.
func TestLBSync_classSelection(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, e.nodeIP(0), 61000, "tcp")))
	e.createService(t, lbService(ns, "noclass", nil))
	e.createService(t, lbService(ns, "other", ptr("example.com/lb")))
	e.createService(t, lbService(ns, "ours", ourClass))
	waitPools(t, e.npl, ns, "ours", map[string][]lbmodel.Member{
		e.npl.poolName(ns, "ours", lbmodel.TCP, 80): {member(e.nodeIP(0), 61000, true)},
	})
	// The other two were synced (a claim, a provider call and a status
	// write would show now) once a sync begun after a later change of each
	// is done.
	e.syncedAfter(t, "services", ns, "noclass", e.npl)
	e.syncedAfter(t, "services", ns, "other", e.npl)
	for _, name := range []string{"noclass", "other"} {
		if _, _, ok, err := pools(e.npl, ns, name); ok || err != nil {
			t.Errorf("service %s got a load balancer (err %v)", name, err)
		}
		s := e.service(t, ns, name)
		if s.Annotations[contract.ServiceEnabledKey] != "" || len(s.Finalizers) != 0 || len(s.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("service %s was touched: annotations %v finalizers %v status %v", name, s.Annotations, s.Finalizers, s.Status)
		}
	}
}

// TestLBSync_releaseWhenNoLongerOurs: changing the type removes the load
// balancer, the status, the finalizer and the opt-in we added, but a user's
// own opt-in stays.
func TestLBSync_releaseWhenNoLongerOurs(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, e.nodeIP(0), 61000, "tcp")))
	e.createService(t, lbService(ns, "auto", ourClass))
	user := lbService(ns, "user", ourClass)
	user.Annotations = map[string]string{contract.ServiceEnabledKey: "true"}
	e.createService(t, user)
	for _, name := range []string{"auto", "user"} {
		waitFor(t, 20*time.Second, name+" synced", func() (bool, error) {
			return len(e.service(t, ns, name).Status.LoadBalancer.Ingress) == 1, nil
		})
	}
	if e.service(t, ns, "user").Annotations[contract.AutoAnnotatedKey] != "" {
		t.Error("a user's own opt-in was marked as auto-annotated")
	}
	for _, name := range []string{"auto", "user"} {
		e.updateService(t, ns, name, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Spec.LoadBalancerClass = nil
			for i := range s.Spec.Ports {
				s.Spec.Ports[i].NodePort = 0
			}
			s.Spec.AllocateLoadBalancerNodePorts = nil
		})
	}
	for _, name := range []string{"auto", "user"} {
		waitFor(t, 20*time.Second, name+" released", func() (bool, error) {
			_, _, ok, err := pools(e.npl, ns, name)
			s := e.service(t, ns, name)
			return err == nil && !ok && len(s.Finalizers) == 0 && len(s.Status.LoadBalancer.Ingress) == 0 && condition(s) == nil, nil
		})
	}
	if s := e.service(t, ns, "auto"); s.Annotations[contract.ServiceEnabledKey] != "" || s.Annotations[contract.AutoAnnotatedKey] != "" {
		t.Errorf("our opt-in was not removed: %v", s.Annotations)
	}
	if s := e.service(t, ns, "user"); s.Annotations[contract.ServiceEnabledKey] != "true" {
		t.Errorf("the user's opt-in was removed: %v", s.Annotations)
	}
}

// TestLBSync_requestedVIPAndFinalizerCleanup: spec.loadBalancerIP is the
// VIP; deleting the Service waits for the load balancer to be deleted.
func TestLBSync_requestedVIPAndFinalizerCleanup(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, e.nodeIP(0), 61000, "tcp")))
	s := lbService(ns, "fixed", ourClass)
	s.Spec.LoadBalancerIP = "198.18.100.9"
	e.createService(t, s)
	waitFor(t, 20*time.Second, "requested VIP in the status", func() (bool, error) {
		in := e.service(t, ns, "fixed").Status.LoadBalancer.Ingress
		return len(in) == 1 && in[0].IP == "198.18.100.9", nil
	})
	if err := e.client.CoreV1().Services(ns).Delete(context.Background(), "fixed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "service and load balancer gone", func() (bool, error) {
		_, err := e.client.CoreV1().Services(ns).Get(context.Background(), "fixed", metav1.GetOptions{})
		_, _, ok, perr := pools(e.npl, ns, "fixed")
		return err != nil && perr == nil && !ok, nil
	})
}

// TestLBSync_terminatingPodDrains: a terminating Pod stays as a disabled
// member until it is gone.
func TestLBSync_terminatingPodDrains(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	ip := e.nodeIP(0)
	e.pod(t, ns, "stay", e.nodeName(0), list(entry(8080, ip, 61000, "tcp")))
	e.pod(t, ns, "leave", e.nodeName(0), list(entry(8080, ip, 61001, "tcp")))
	e.createService(t, lbService(ns, "web", ourClass))
	pool := e.npl.poolName(ns, "web", lbmodel.TCP, 80)
	waitPools(t, e.npl, ns, "web", map[string][]lbmodel.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}})
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "leave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cluster keeps a deleted Pod for 4 s (TerminationDelay).
	waitPools(t, e.npl, ns, "web", map[string][]lbmodel.Member{pool: {member(ip, 61000, true), member(ip, 61001, false)}})
	waitPools(t, e.npl, ns, "web", map[string][]lbmodel.Member{pool: {member(ip, 61000, true)}})
}
