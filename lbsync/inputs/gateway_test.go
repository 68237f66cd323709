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
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
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

// The route kinds beyond HTTPRoute, BackendTLSPolicy and, of the
// experimental group, XBackendTrafficPolicy are served when their CRDs
// are.
func TestGatewayKindsServed(t *testing.T) {
	for _, tc := range []struct {
		resources, xresources []string
		served, missing       []string
	}{
		{[]string{"tcproutes", "tlsroutes"}, nil, []string{"TCPRoute", "TLSRoute"},
			[]string{"GRPCRoute", "UDPRoute", "BackendTLSPolicy", "XBackendTrafficPolicy"}},
		{[]string{"backendtlspolicies", "grpcroutes"}, []string{"xlistenersets"}, []string{"GRPCRoute", "BackendTLSPolicy"},
			[]string{"TCPRoute", "UDPRoute", "TLSRoute", "XBackendTrafficPolicy"}},
		{nil, []string{"xbackendtrafficpolicies"}, []string{"XBackendTrafficPolicy"},
			[]string{"GRPCRoute", "TCPRoute", "UDPRoute", "TLSRoute", "BackendTLSPolicy"}},
	} {
		l := &metav1.APIResourceList{GroupVersion: gatewayv1.GroupVersion.String()}
		for _, n := range append([]string{"gatewayclasses", "gateways", "httproutes", "referencegrants"}, tc.resources...) {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		lists := []*metav1.APIResourceList{l}
		if tc.xresources != nil {
			x := &metav1.APIResourceList{GroupVersion: gatewayxv1a1.GroupVersion.String()}
			for _, n := range tc.xresources {
				x.APIResources = append(x.APIResources, metav1.APIResource{Name: n})
			}
			lists = append(lists, x)
		}
		d := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: lists}}
		served, missing, err := GatewayKindsServed(d)
		if err != nil || !slices.Equal(served, tc.served) || !slices.Equal(missing, tc.missing) {
			t.Errorf("%v: served %v missing %v err %v; want %v %v", tc.resources, served, missing, err, tc.served, tc.missing)
		}
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
	secrets := fakeReads(&reads, "secrets", func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	})
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

// GatewayInput keeps the BackendTLSPolicies and XBackendTrafficPolicies of
// the routes' backends, and
// reads each CA ConfigMap they name once: a missing one is left out, a
// forbidden one named, any other error fails.
func TestStore_gatewayInputBackendTLS(t *testing.T) {
	s := Store{
		Services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ServiceIndexers()),
		Pods:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, PodIndexers()),
	}
	if err := s.Services.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	hr := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "h"}}
	hr.Spec.Rules = []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: "db"}}}}}}
	policy := func(name, svc string, cms ...string) *gatewayv1.BackendTLSPolicy {
		p := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
		p.Spec.TargetRefs = []gatewayv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gatewayv1.LocalPolicyTargetReference{
			Kind: "Service", Name: gatewayv1.ObjectName(svc)}}}
		for _, c := range cms {
			p.Spec.Validation.CACertificateRefs = append(p.Spec.Validation.CACertificateRefs,
				gatewayv1.LocalObjectReference{Kind: "ConfigMap", Name: gatewayv1.ObjectName(c)})
		}
		return p
	}
	reads := 0
	configMaps := fakeReads(&reads, "configmaps", func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	})
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"}}
	traffic := func(name, svc string) *gatewayxv1a1.XBackendTrafficPolicy {
		return &gatewayxv1a1.XBackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: gatewayxv1a1.BackendTrafficPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Kind: "Service", Name: gatewayv1.ObjectName(svc)}}}}
	}
	src := GatewaySources{Routes: []any{hr}, ConfigMaps: configMaps, BackendTLSPolicies: []*gatewayv1.BackendTLSPolicy{
		policy("db", "db", "ca", "gone", "secret"), policy("db2", "db", "ca"), policy("other", "web", "broken")},
		TrafficPolicies: []*gatewayxv1a1.XBackendTrafficPolicy{traffic("web", "web"), traffic("db", "db")}}
	in, err := s.GatewayInput(context.Background(), Settings{}, gw, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.TrafficPolicies) != 1 || in.TrafficPolicies[0].Name != "db" {
		t.Errorf("XBackendTrafficPolicies %v, want those of db only", in.TrafficPolicies)
	}
	var names []string
	for _, p := range in.BackendTLSPolicies {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"db", "db2"}) || len(in.ConfigMaps) != 1 || in.ConfigMaps[0].Name != "ca" || reads != 3 ||
		!slices.Equal(in.ForbiddenConfigMaps, []string{"shop/secret"}) {
		t.Errorf("policies %v, %d ConfigMaps read %d times, forbidden %v", names, len(in.ConfigMaps), reads, in.ForbiddenConfigMaps)
	}
	src.BackendTLSPolicies = append(src.BackendTLSPolicies, policy("broken", "db", "broken"))
	if _, err := s.GatewayInput(context.Background(), Settings{}, gw, src, nil); err == nil {
		t.Error("a ConfigMap that cannot be read for another reason: no error")
	}
}

// fakeReads is a reader of an API resource that counts its reads: the
// object named "gone" is not found, "secret" forbidden, "broken" fails
// otherwise, any other is made.
func fakeReads[T any](reads *int, resource string, made func(ns, name string) T) func(context.Context, string, string) (T, error) {
	return func(_ context.Context, ns, name string) (T, error) {
		*reads++
		gr := schema.GroupResource{Resource: resource}
		var none T
		switch name {
		case "gone":
			return none, apierrors.NewNotFound(gr, name)
		case "secret":
			return none, apierrors.NewForbidden(gr, name, errors.New("no"))
		case "broken":
			return none, errors.New("connection refused")
		}
		return made(ns, name), nil
	}
}

// GatewayInput reads the ConfigMaps of the Gateway's client CA
// certificates (spec.tls.frontend), of any namespace (the builder checks
// the ReferenceGrants), once each, a forbidden one named.
func TestStore_gatewayInputFrontendCAs(t *testing.T) {
	s := Store{
		Services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, ServiceIndexers()),
		Pods:     cache.NewIndexer(cache.MetaNamespaceKeyFunc, PodIndexers()),
	}
	reads := 0
	configMaps := fakeReads(&reads, "configmaps", func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	})
	other := gatewayv1.Namespace("other")
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}}
	gw.Spec.TLS = &gatewayv1.GatewayTLSConfig{Frontend: &gatewayv1.FrontendTLSConfig{
		Default: gatewayv1.TLSConfig{Validation: &gatewayv1.FrontendTLSValidation{CACertificateRefs: []gatewayv1.ObjectReference{
			{Kind: "ConfigMap", Name: "ca"}, {Kind: "ConfigMap", Name: "secret"}, {Kind: "Service", Name: "svc"}}}},
		PerPort: []gatewayv1.TLSPortConfig{{Port: 8443, TLS: gatewayv1.TLSConfig{Validation: &gatewayv1.FrontendTLSValidation{
			CACertificateRefs: []gatewayv1.ObjectReference{{Kind: "ConfigMap", Name: "ca"}, {Kind: "ConfigMap", Name: "ca", Namespace: &other}}}}}},
	}}
	in, err := s.GatewayInput(context.Background(), Settings{}, gw, GatewaySources{FrontendConfigMaps: configMaps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range in.ConfigMaps {
		got = append(got, c.Namespace+"/"+c.Name)
	}
	if !slices.Equal(got, []string{"infra/ca", "other/ca"}) || reads != 3 || !slices.Equal(in.ForbiddenConfigMaps, []string{"infra/secret"}) {
		t.Errorf("ConfigMaps %v read %d times, forbidden %v; want infra/ca and other/ca, 3 reads, infra/secret forbidden",
			got, reads, in.ForbiddenConfigMaps)
	}
	if in, _ := s.GatewayInput(context.Background(), Settings{}, gw, GatewaySources{}, nil); len(in.ConfigMaps) != 0 {
		t.Errorf("without a reader: ConfigMaps %v", in.ConfigMaps)
	}
}
