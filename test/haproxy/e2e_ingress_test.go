package haproxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// TestEndToEnd_ingressThroughTheVIP: an Ingress of our class with two hosts
// and two backend Services gets a VIP on the edge, requests for each host
// land on that backend's Pods only, and deleting the Ingress removes its
// load balancer from the edge (an L7 Delete through npl-lbsync).
func TestEndToEnd_ingressThroughTheVIP(t *testing.T) {
	c, b := clusterBed(t)
	const name, class = "e2e-haproxy-ing", "npl-haproxy"
	extraConfig = "ingressClass: " + class + "\n"
	startLBSync(t, c, b, name)
	extraConfig = ""
	client := c.Client()
	ctx := context.Background()
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
	if _, err := client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	ns := c.TestNamespace(t)
	for _, app := range []string{"alpha", "beta"} {
		if _, err := client.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, app, 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}}}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prefix := networkingv1.PathTypePrefix
	rule := func(host, svc string) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
		}}}
	}
	cls := class
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: networkingv1.IngressSpec{
		IngressClassName: &cls, Rules: []networkingv1.IngressRule{rule("alpha.example", "alpha"), rule("beta.example", "beta")}}}
	if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip string
	waitForCond(t, 90*time.Second, "the Ingress's VIP", func() (bool, error) {
		i, err := client.NetworkingV1().Ingresses(ns).Get(ctx, "shop", metav1.GetOptions{})
		if err != nil || len(i.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = i.Status.LoadBalancer.Ingress[0].IP
		return true, nil
	})
	url := edgebed.URL(vip, 80)
	hc := b.ClientHTTP(3 * time.Second)
	for _, app := range []string{"alpha", "beta"} {
		waitForCond(t, 60*time.Second, "requests for "+app+".example reach both "+app+" Pods only", func() (bool, error) {
			seen := map[string]bool{}
			for range 8 {
				got, err := getHost(ctx, hc, url, app+".example", "/")
				if err != nil {
					return false, err
				}
				got = strings.TrimSpace(got)
				if !strings.HasPrefix(got, app+"-") {
					return false, fmt.Errorf("%s.example answered by %s", app, got)
				}
				seen[got] = true
			}
			return len(seen) == 2, nil
		})
	}
	t.Logf("Ingress VIP %s: each host's requests land on its own backend's Pods", vip)

	p, err := b.OpenProvider(ctx, name, b.ProviderSection(name))
	if err != nil {
		t.Fatal(err)
	}
	lbName := lbmodel.IngressLoadBalancerName(name, ns, "shop")
	if got := listOne(t, p, lbName); !got.IsL7() || len(got.Pools) != 2 {
		t.Fatalf("the edge serves %+v; want an L7 load balancer with 2 pools", got)
	}
	if err := client.NetworkingV1().Ingresses(ns).Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCond(t, 60*time.Second, "the Ingress's load balancer gone from the edge", func() (bool, error) {
		lbs, err := p.List(ctx)
		if err != nil {
			return false, err
		}
		for _, lb := range lbs {
			if lb.Name == lbName {
				return false, nil
			}
		}
		return true, nil
	})
}
