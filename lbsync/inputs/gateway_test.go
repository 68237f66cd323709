package inputs

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
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
