package ingress

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func class(name, controller string, isDefault bool) *networkingv1.IngressClass {
	c := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if isDefault {
		c.Annotations = map[string]string{DefaultClassAnnotation: "true"}
	}
	return c
}

func TestOurs_followsIngressClasses(t *testing.T) {
	ours := class("npl", ControllerName, false)
	oursDefault := class("npl", ControllerName, true)
	nginx := class("nginx", "k8s.io/ingress-nginx", false)
	nginxDefault := class("nginx", "k8s.io/ingress-nginx", true)
	second := class("npl-b", ControllerName, false)
	tests := []struct {
		name    string
		ing     *networkingv1.Ingress
		classes []*networkingv1.IngressClass
		cfg     Config
		want    bool
	}{
		{"ingressClassName names our class", ingress("a", className("npl")), []*networkingv1.IngressClass{ours, nginx}, Config{}, true},
		{"ingressClassName names another controller's class", ingress("a", className("nginx")), []*networkingv1.IngressClass{ours, nginx}, Config{}, false},
		{"ingressClassName names a class that does not exist", ingress("a", className("npl")), []*networkingv1.IngressClass{nginx}, Config{}, false},
		{"no class and ours is the default", ingress("a"), []*networkingv1.IngressClass{oursDefault, nginx}, Config{}, true},
		{"no class and another is the default", ingress("a"), []*networkingv1.IngressClass{ours, nginxDefault}, Config{}, false},
		{"no class and no default", ingress("a"), []*networkingv1.IngressClass{ours}, Config{}, false},
		{"the legacy annotation names our class", ingress("a", annotated(LegacyClassAnnotation, "npl")), []*networkingv1.IngressClass{ours}, Config{}, true},
		{"ingressClassName wins over the legacy annotation", ingress("a", className("nginx"), annotated(LegacyClassAnnotation, "npl")),
			[]*networkingv1.IngressClass{ours, nginx}, Config{}, false},
		{"a configured class: another class of our controller is not ours", ingress("a", className("npl-b")),
			[]*networkingv1.IngressClass{ours, second}, Config{IngressClass: "npl"}, false},
		{"a configured class: it is ours", ingress("a", className("npl")),
			[]*networkingv1.IngressClass{ours, second}, Config{IngressClass: "npl"}, true},
		{"a configured class: no class, and the default is another of our controller's", ingress("a"),
			[]*networkingv1.IngressClass{ours, class("npl-b", ControllerName, true)}, Config{IngressClass: "npl"}, false},
		{"nil", nil, []*networkingv1.IngressClass{oursDefault}, Config{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ours(tt.ing, tt.classes, tt.cfg); got != tt.want {
				t.Errorf("Ours = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBackends_listsEachServiceOnce(t *testing.T) {
	ing := ingress("web", defaultBackend(backend("shop", 80)),
		rule("a.example.com", prefix("/", backend("cart", 80)), exact("/x", backend("shop", "http"))),
		rule("b.example.com", prefix("/bucket", networkingv1.IngressBackend{
			Resource: &corev1.TypedLocalObjectReference{Kind: "Bucket", Name: "b"}})),
		func(i *networkingv1.Ingress) {
			i.Spec.Rules = append(i.Spec.Rules, networkingv1.IngressRule{Host: "c"})
		})
	want := []ServiceRef{{Namespace: "shop", Name: "cart"}, {Namespace: "shop", Name: "shop"}}
	if diff := cmp.Diff(want, Backends(ing)); diff != "" {
		t.Errorf("Backends (-want +got):\n%s", diff)
	}
	if got := want[0].String(); got != "shop/cart" {
		t.Errorf("String = %q", got)
	}
	if got := Backends(nil); got != nil {
		t.Errorf("Backends(nil) = %v", got)
	}
}

func TestWantsOptIn_asNPLAgentMapsServices(t *testing.T) {
	noSelector := service("a")
	noSelector.Spec.Selector = nil
	tests := []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"ClusterIP with a selector", service("a"), true},
		{"LoadBalancer with a selector", service("a", svcType(corev1.ServiceTypeLoadBalancer)), true},
		{"no type set", service("a", svcType("")), true},
		{"NodePort", service("a", svcType(corev1.ServiceTypeNodePort)), false},
		{"ExternalName", service("a", svcType(corev1.ServiceTypeExternalName)), false},
		{"no selector", noSelector, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WantsOptIn(tt.svc); got != tt.want {
				t.Errorf("WantsOptIn = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLoadBalancerName_dedicatedOrShared(t *testing.T) {
	ing := ingress("web")
	if got, want := LoadBalancerName("c1", ing, false, "npl"), "c1--shop_web-L7"; got != want {
		t.Errorf("dedicated: %q, want %q", got, want)
	}
	if got, want := LoadBalancerName("c1", ing, true, "npl"), "c1--Shared-L7-npl"; got != want {
		t.Errorf("shared: %q, want %q", got, want)
	}
}
