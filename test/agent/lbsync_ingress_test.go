package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/ingress"
)

func ingressRule(host, svc string) networkingv1.IngressRule {
	prefix := networkingv1.PathTypePrefix
	return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
		Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
	}}}
}

// TestIngress_endToEnd: for each provider, an Ingress of our class with two
// hosts and two backends gets a pool per backend holding exactly that
// backend's ready Pods (whose Services npl-lbsync opted in), each member
// answers with a Pod of the right backend, the Ingress gets its VIP, and
// removing a backend removes its pool and the opt-in we added.
func TestIngress_endToEnd(t *testing.T) {
	e := setup(t)
	for i, provider := range []string{"mock", "avi", "bigip"} {
		t.Run(provider, func(t *testing.T) {
			vipSubnet := netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/28", 130+i))
			class := "npl-" + provider
			cluster := "e2e-ing-" + provider
			_, backend := e.startLBSync(t, "npl-lbsync-ingress-"+provider, provider, vipSubnet,
				fmt.Sprintf("clusterName: %s\nloadBalancerClass: npl.io/none\ningressClass: %s\ndrainSeconds: 0\n", cluster, class))
			ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
			if _, err := e.client.NetworkingV1().IngressClasses().Create(context.Background(), ic, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = e.client.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
			})

			ns := e.namespace(t)
			for _, app := range []string{"alpha", "beta"} {
				if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), deployment(ns, app, 2), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				e.createService(t, &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
					Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app},
						Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
				})
			}
			ing := &networkingv1.Ingress{
				ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
				Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{
					ingressRule("alpha.example", "alpha"), ingressRule("beta.example", "beta"),
				}},
			}
			if _, err := e.client.NetworkingV1().Ingresses(ns).Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			lbName := lbmodel.IngressLoadBalancerName(cluster, ns, "shop")
			for _, app := range []string{"alpha", "beta"} {
				want, owner := e.expectedMembers(t, ns, map[string]string{"app": app}, 2)
				pool := lbmodel.IngressPoolName(lbName, ns, app, "80")
				waitFor(t, 30*time.Second, "pool "+pool, func() (bool, error) {
					got, _, ok, err := backend.Pools(lbName)
					if err == nil && ok && !sameMembers(got[pool], want) {
						err = fmt.Errorf("pool %s = %v, want %v (pools %v)", pool, got[pool], want, got)
					}
					return ok && err == nil, err
				})
				for _, m := range want {
					target := addr(m.IP, int(m.Port))
					body, err := get(target)
					if err != nil || body != owner[target] || !strings.HasPrefix(body, app+"-") {
						t.Errorf("member %s of %s answered %q (%v), want %s", target, app, body, err, owner[target])
					}
				}
				if s := e.service(t, ns, app); s.Annotations[contract.ServiceEnabledKey] != "true" || s.Annotations[contract.AutoAnnotatedKey] != "true" {
					t.Errorf("backend %s not opted in: %v", app, s.Annotations)
				}
			}
			waitFor(t, 20*time.Second, "the VIP in the Ingress status", func() (bool, error) {
				_, vips, _, _ := backend.Pools(lbName)
				cur, err := e.client.NetworkingV1().Ingresses(ns).Get(context.Background(), "shop", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				in := cur.Status.LoadBalancer.Ingress
				return len(vips) == 1 && len(in) == 1 && in[0].IP == vips[0], nil
			})

			// Drop the beta backend: its pool and our opt-in go.
			cur, err := e.client.NetworkingV1().Ingresses(ns).Get(context.Background(), "shop", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cur.Spec.Rules = cur.Spec.Rules[:1]
			if _, err := e.client.NetworkingV1().Ingresses(ns).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			betaPool := lbmodel.IngressPoolName(lbName, ns, "beta", "80")
			waitFor(t, 30*time.Second, "beta's pool removed and its opt-in gone", func() (bool, error) {
				got, _, _, err := backend.Pools(lbName)
				_, hasPool := got[betaPool]
				s := e.service(t, ns, "beta")
				return err == nil && !hasPool && s.Annotations[contract.ServiceEnabledKey] == "", err
			})
			if s := e.service(t, ns, "alpha"); s.Annotations[contract.ServiceEnabledKey] != "true" {
				t.Errorf("alpha lost its opt-in: %v", s.Annotations)
			}
		})
	}
}

// TestIngress_sharedVIP: with ingressSharedVIP, two Ingresses of the class
// share one load balancer and VIP; deleting one removes only its pool.
func TestIngress_sharedVIP(t *testing.T) {
	e := setup(t)
	class := "npl-shared"
	cluster := "e2e-shared"
	_, backend := e.startLBSync(t, "npl-lbsync-ingress-shared", "mock", netip.MustParsePrefix("198.18.135.0/28"),
		fmt.Sprintf("clusterName: %s\nloadBalancerClass: npl.io/none\ningressClass: %s\ningressSharedVIP: true\ndrainSeconds: 0\n", cluster, class))
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
	if _, err := e.client.NetworkingV1().IngressClasses().Create(context.Background(), ic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.client.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	ns := e.namespace(t)
	for _, app := range []string{"alpha", "beta"} {
		if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), deployment(ns, app, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.createService(t, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
		})
		ing := &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
			Spec:       networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{ingressRule(app+".example", app)}},
		}
		if _, err := e.client.NetworkingV1().Ingresses(ns).Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lbName := lbmodel.SharedIngressLoadBalancerName(cluster, class)
	pool := func(app string) string { return lbmodel.IngressPoolName(lbName, ns, app, "80") }
	waitFor(t, 60*time.Second, "both Ingresses on one VIP, a pool each", func() (bool, error) {
		pools, vips, ok, err := backend.Pools(lbName)
		if err != nil || !ok || len(vips) != 1 || len(pools[pool("alpha")]) != 1 || len(pools[pool("beta")]) != 1 {
			return false, err
		}
		for _, app := range []string{"alpha", "beta"} {
			ing, err := e.client.NetworkingV1().Ingresses(ns).Get(context.Background(), app, metav1.GetOptions{})
			if err != nil || len(ing.Status.LoadBalancer.Ingress) != 1 || ing.Status.LoadBalancer.Ingress[0].IP != vips[0] {
				return false, err
			}
		}
		return true, nil
	})
	if err := e.client.NetworkingV1().Ingresses(ns).Delete(context.Background(), "beta", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "beta's pool gone, alpha's kept, beta deleted", func() (bool, error) {
		pools, _, ok, err := backend.Pools(lbName)
		_, gone := e.client.NetworkingV1().Ingresses(ns).Get(context.Background(), "beta", metav1.GetOptions{})
		_, hasBeta := pools[pool("beta")]
		return err == nil && ok && !hasBeta && len(pools[pool("alpha")]) == 1 && gone != nil, err
	})
}
