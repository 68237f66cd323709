// Package ingress turns Ingresses into L7 load balancer models. It decides
// which Ingresses npl-lbsync serves (Ours), which Services their backends
// are (Backends, WantsOptIn, for auto-annotation), and builds the model of
// an Ingress, or of all Ingresses of a class that share one VIP (Build):
// host and path rules to one pool per backend Service port, a default pool,
// and the TLS certificates of their Secrets. Pool members come from the L4
// builder, so they are exactly what a LoadBalancer Service would get. It is
// pure: objects in, model and report out.
package ingress

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const (
	// ControllerName is the spec.controller of the IngressClasses whose
	// Ingresses npl-lbsync serves; the chart creates one from ingressClass.
	ControllerName = "npl.io/ingress-controller"
	// DefaultClassAnnotation marks the IngressClass that Ingresses without
	// a class belong to.
	DefaultClassAnnotation = networkingv1.AnnotationIsDefaultIngressClass
	// LegacyClassAnnotation is the class annotation that predates
	// spec.ingressClassName; it still names the class of Ingresses that set
	// it and no ingressClassName.
	LegacyClassAnnotation = "kubernetes.io/ingress.class"
)

// Config is the part of npl-lbsync's configuration that decides which
// Ingresses are ours.
type Config struct {
	// IngressClass is the name of our IngressClass (the ingressClass
	// setting). Empty accepts every IngressClass whose controller is
	// ControllerName.
	IngressClass string
}

// Ours reports whether npl-lbsync serves ing: its class (ingressClassName,
// else the legacy annotation) names an IngressClass of classes whose
// controller is ControllerName and that cfg accepts, or it names no class
// and such an IngressClass is the default one (annotation
// ingressclass.kubernetes.io/is-default-class: "true").
//
// Like claim.Ours, it looks at the spec only, not at deletionTimestamp.
func Ours(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass, cfg Config) bool {
	if ing == nil {
		return false
	}
	if name := ClassName(ing); name != "" {
		c := findClass(classes, name)
		return c != nil && accepts(c, cfg)
	}
	for _, c := range classes {
		if c != nil && c.Annotations[DefaultClassAnnotation] == "true" && accepts(c, cfg) {
			return true
		}
	}
	return false
}

// ClassName is the class ing names: spec.ingressClassName, else the legacy
// annotation; empty when it names none.
func ClassName(ing *networkingv1.Ingress) string {
	if ing.Spec.IngressClassName != nil && *ing.Spec.IngressClassName != "" {
		return *ing.Spec.IngressClassName
	}
	return ing.Annotations[LegacyClassAnnotation]
}

func findClass(classes []*networkingv1.IngressClass, name string) *networkingv1.IngressClass {
	for _, c := range classes {
		if c != nil && c.Name == name {
			return c
		}
	}
	return nil
}

func accepts(c *networkingv1.IngressClass, cfg Config) bool {
	return c.Spec.Controller == ControllerName && (cfg.IngressClass == "" || c.Name == cfg.IngressClass)
}

// ServiceRef names a Service.
type ServiceRef struct {
	Namespace string
	Name      string
}

// String is "namespace/name".
func (r ServiceRef) String() string { return r.Namespace + "/" + r.Name }

// Backends returns the Services ing sends requests to (default backend and
// rule paths; resource backends are not Services), without duplicates,
// sorted. npl-lbsync opts them in to NodePortLocal while an Ingress of ours
// references them.
func Backends(ing *networkingv1.Ingress) []ServiceRef {
	if ing == nil {
		return nil
	}
	seen := map[ServiceRef]bool{}
	add := func(b *networkingv1.IngressBackend) {
		if b != nil && b.Service != nil && b.Service.Name != "" {
			seen[ServiceRef{Namespace: ing.Namespace, Name: b.Service.Name}] = true
		}
	}
	add(ing.Spec.DefaultBackend)
	for _, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for i := range r.HTTP.Paths {
			add(&r.HTTP.Paths[i].Backend)
		}
	}
	out := make([]ServiceRef, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ServiceRef) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// WantsOptIn reports whether a backend Service gets the NodePortLocal opt-in
// annotation: npl-agent maps the Pods of Services that have a selector and
// are not of type NodePort or ExternalName. A NodePort backend is reported
// by Build instead (a Warning in NodePortLocal mode, as AKO does).
func WantsOptIn(svc *corev1.Service) bool {
	if svc == nil || len(svc.Spec.Selector) == 0 {
		return false
	}
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeLoadBalancer:
		return true
	}
	return false
}
