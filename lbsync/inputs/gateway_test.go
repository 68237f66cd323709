package inputs

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestGatewayAPIServed(t *testing.T) {
	resources := func(names ...string) []*metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: gatewayv1.GroupVersion.String()}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		return []*metav1.APIResourceList{l}
	}
	tests := []struct {
		name      string
		resources []*metav1.APIResourceList
		served    bool
		missing   []string
	}{
		{"all", resources("gatewayclasses", "gateways", "httproutes", "referencegrants", "grpcroutes"), true, nil},
		{"no referencegrants", resources("gatewayclasses", "gateways", "httproutes"), false, []string{"referencegrants"}},
		{"no CRDs", nil, false, gatewayResources},
	}
	for _, tt := range tests {
		d := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: tt.resources}}
		served, missing, err := GatewayAPIServed(d)
		if err != nil || served != tt.served || !slices.Equal(missing, tt.missing) {
			t.Errorf("%s: served %v missing %v err %v; want %v %v", tt.name, served, missing, err, tt.served, tt.missing)
		}
	}
}

// The route kinds beyond HTTPRoute are served when their CRDs are.
func TestGatewayRouteKindsServed(t *testing.T) {
	l := &metav1.APIResourceList{GroupVersion: gatewayv1.GroupVersion.String()}
	for _, n := range []string{"gatewayclasses", "gateways", "httproutes", "referencegrants", "tcproutes", "tlsroutes"} {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
	}
	d := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{l}}}
	served, missing, err := GatewayRouteKindsServed(d)
	if err != nil || !slices.Equal(served, []string{"TCPRoute", "TLSRoute"}) || !slices.Equal(missing, []string{"GRPCRoute", "UDPRoute"}) {
		t.Errorf("served %v missing %v err %v", served, missing, err)
	}
}

// GatewayInput puts each route into its kind's field and each backend
// Service once, with its Pods; of the listeners' certificate Secrets, a
// missing one is left out, a forbidden one is named, a readable one read
// once, and any other error fails.
func TestStore_gatewayInput(t *testing.T) {
	s := Store{
		Services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ServiceIndexers()),
		Pods:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, PodIndexers()),
	}
	labels := map[string]string{"app": "db"}
	for _, obj := range []any{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}, Spec: corev1.ServiceSpec{Selector: labels}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-1", Labels: labels}},
	} {
		var err error
		if _, ok := obj.(*corev1.Service); ok {
			err = s.Services.Add(obj)
		} else {
			err = s.Pods.Add(obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ref := gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "db"}}
	hr := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "h"}}
	hr.Spec.Rules = []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: ref}}}}
	tr := &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "t"}}
	tr.Spec.Rules = []gatewayv1.TCPRouteRule{{BackendRefs: []gatewayv1.BackendRef{ref}}}
	certs := func(names ...string) *gatewayv1.ListenerTLSConfig {
		c := &gatewayv1.ListenerTLSConfig{}
		for _, n := range names {
			c.CertificateRefs = append(c.CertificateRefs, gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(n)})
		}
		return c
	}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		Listeners: []gatewayv1.Listener{{Name: "a", TLS: certs("ok", "gone", "secret")}, {Name: "b", TLS: certs("ok")}}}}
	reads := 0
	secrets := func(_ context.Context, ns, name string) (*corev1.Secret, error) {
		reads++
		gr := schema.GroupResource{Resource: "secrets"}
		switch name {
		case "gone":
			return nil, apierrors.NewNotFound(gr, name)
		case "secret":
			return nil, apierrors.NewForbidden(gr, name, errors.New("no"))
		case "broken":
			return nil, errors.New("connection refused")
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, nil
	}
	in, err := s.GatewayInput(context.Background(), Settings{ClusterName: "c1"}, gw, GatewaySources{Routes: []any{hr, tr}}, secrets)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Routes) != 1 || len(in.TCPRoutes) != 1 || len(in.Services) != 1 || len(in.Pods) != 1 || in.Gateway != gw || in.ClusterName != "c1" {
		t.Errorf("input: %d HTTPRoutes, %d TCPRoutes, %d Services, %d Pods", len(in.Routes), len(in.TCPRoutes), len(in.Services), len(in.Pods))
	}
	if len(in.Secrets) != 1 || in.Secrets[0].Name != "ok" || reads != 3 || !slices.Equal(in.ForbiddenSecrets, []string{"shop/secret"}) {
		t.Errorf("secrets %d read %d times, forbidden %v", len(in.Secrets), reads, in.ForbiddenSecrets)
	}
	gw.Spec.Listeners[1].TLS = certs("broken")
	if _, err := s.GatewayInput(context.Background(), Settings{}, gw, GatewaySources{}, secrets); err == nil {
		t.Error("a Secret that cannot be read for another reason: no error")
	}
}
