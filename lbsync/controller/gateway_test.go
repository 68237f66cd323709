package controller

import (
	"encoding/json"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
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

// A route's parent index names the Gateways of its parentRefs and those
// whose entry of ours its status still holds, so a Gateway it left can
// remove its entry.
func TestRouteParentIndex(t *testing.T) {
	other := gatewayv1.Namespace("infra")
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "r"}}
	rt.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "a"}, {Name: "b", Namespace: &other}, {Name: "a"}}
	rt.Status.Parents = []gatewayv1.RouteParentStatus{
		{ParentRef: gatewayv1.ParentReference{Name: "old"}, ControllerName: gateway.ControllerName},
		{ParentRef: gatewayv1.ParentReference{Name: "theirs"}, ControllerName: "example.org/other"},
	}
	got, _ := routeParents(rt)
	if want := []string{"shop/a", "infra/b", "shop/old"}; !slices.Equal(got, want) {
		t.Errorf("index %v, want %v", got, want)
	}
	var nilRoute *gatewayv1.HTTPRoute
	if got, _ := routeParents(nilRoute); got != nil {
		t.Errorf("nil route: %v", got)
	}
}

// statusPatch removes what the status no longer has.
func TestStatusPatch(t *testing.T) {
	patch, err := statusPatch(gatewayv1.GatewayStatus{Conditions: []metav1.Condition{}}, "addresses")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m["status"]["addresses"]; !ok || v != nil {
		t.Errorf("patch %s: addresses not null", patch)
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

// The indexes hold the routes of every kind.
func TestRouteIndexesOfOtherKinds(t *testing.T) {
	rt := &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "r"}}
	rt.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "a"}}
	rt.Spec.Rules = []gatewayv1.TCPRouteRule{{BackendRefs: []gatewayv1.BackendRef{{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "db"}}}}}
	rt.Status.Parents = []gatewayv1.RouteParentStatus{{ParentRef: gatewayv1.ParentReference{Name: "old"}, ControllerName: gateway.ControllerName}}
	if got, _ := routeParents(rt); !slices.Equal(got, []string{"shop/a", "shop/old"}) {
		t.Errorf("parents %v", got)
	}
	if got, _ := routeBackends(rt); !slices.Equal(got, []string{"shop/db"}) {
		t.Errorf("backends %v", got)
	}
	if got, _ := routeParents(&gatewayv1.Gateway{}); got != nil {
		t.Errorf("a Gateway: %v", got)
	}
}
