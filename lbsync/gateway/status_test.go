package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestGatewayStatus(t *testing.T) {
	tcp := httpL("tcp", 9000, "")
	tcp.Protocol = "example.com/sctp"
	gw := gateway(httpL("http", 80, ""), tcp)
	res := Build(Input{ClusterName: testCluster, Gateway: gw})
	tests := []struct {
		name     string
		res      Result
		p        Programmed
		reason   string
		addrs    int
		httpProg string
	}{
		{"applied", res, Programmed{OK: true, VIPs: []string{"198.18.1.1"}}, "Programmed", 1, "Programmed"},
		{"no VIP yet", res, Programmed{OK: true}, "AddressNotAssigned", 0, "Pending"},
		{"apply failed", res, Programmed{Reason: "Invalid", Message: "boom"}, "Invalid", 0, "Pending"},
		{"nothing to serve", Build(Input{ClusterName: testCluster, Gateway: gateway(tcp)}), Programmed{}, "Invalid", 0, "Invalid"},
	}
	for _, tt := range tests {
		st := GatewayStatus(gw, tt.res, tt.p)
		if c := cond(st.Conditions, "Programmed"); c.Reason != tt.reason || c.ObservedGeneration != 3 {
			t.Errorf("%s: Programmed %s, want %s", tt.name, c.Reason, tt.reason)
		}
		if len(st.Addresses) != tt.addrs {
			t.Errorf("%s: addresses %v", tt.name, st.Addresses)
		}
		if got := cond(st.Listeners[0].Conditions, "Programmed").Reason; got != tt.httpProg {
			t.Errorf("%s: listener Programmed %s, want %s", tt.name, got, tt.httpProg)
		}
		if got := cond(st.Listeners[len(st.Listeners)-1].Conditions, "Programmed").Reason; got != "Invalid" {
			t.Errorf("%s: tcp listener Programmed %s", tt.name, got)
		}
	}
	st := GatewayStatus(gw, res, Programmed{OK: true, VIPs: []string{"198.18.1.1"}})
	if st.Addresses[0].Value != "198.18.1.1" || *st.Addresses[0].Type != gatewayv1.IPAddressType {
		t.Errorf("addresses %+v", st.Addresses)
	}
}

func TestMergeConditions(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	have := []metav1.Condition{{Type: "A", Status: metav1.ConditionTrue, LastTransitionTime: t0}, {Type: "B", Status: metav1.ConditionTrue, LastTransitionTime: t0},
		{Type: "Other", Status: metav1.ConditionTrue, LastTransitionTime: t0}}
	want := []metav1.Condition{{Type: "A", Status: metav1.ConditionTrue}, {Type: "B", Status: metav1.ConditionFalse}}
	got := MergeConditions(have, want, t1, true)
	if len(got) != 2 || !got[0].LastTransitionTime.Equal(&t0) || !got[1].LastTransitionTime.Equal(&t1) {
		t.Errorf("merge %+v", got)
	}
	if got := MergeConditions(have, want, t1, false); len(got) != 3 {
		t.Errorf("merge keeping others: %+v", got)
	}
}

func TestRouteParentsMerge(t *testing.T) {
	now := metav1.NewTime(time.Unix(300, 0))
	ns := gatewayv1.Namespace(infraNS)
	ours := gatewayv1.RouteParentStatus{ParentRef: gatewayv1.ParentReference{Name: "gw", Namespace: &ns}, ControllerName: ControllerName,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionFalse}}}
	otherGW := gatewayv1.RouteParentStatus{ParentRef: gatewayv1.ParentReference{Name: "gw2", Namespace: &ns}, ControllerName: ControllerName}
	otherCtl := gatewayv1.RouteParentStatus{ParentRef: gatewayv1.ParentReference{Name: "gw", Namespace: &ns}, ControllerName: "example.org/other"}
	desired := []gatewayv1.RouteParentStatus{{ParentRef: parentRefWithDefaults(ours.ParentRef), ControllerName: ControllerName,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue}}}}
	got := RouteParents([]gatewayv1.RouteParentStatus{ours, otherGW, otherCtl}, infraNS, "gw", appNS, desired, now)
	if len(got) != 3 || got[0].ParentRef.Name != "gw2" || got[1].ControllerName != "example.org/other" || got[2].Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("parents %+v", got)
	}
	if got := RouteParents([]gatewayv1.RouteParentStatus{ours, otherGW}, infraNS, "gw", appNS, nil, now); len(got) != 1 || got[0].ParentRef.Name != "gw2" {
		t.Errorf("removing our entry: %+v", got)
	}
}

func TestClassStatus(t *testing.T) {
	c := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "npl", Generation: 4}, Spec: gatewayv1.GatewayClassSpec{ControllerName: ControllerName}}
	st := ClassStatus(c, FeaturesFor("mock"))
	if a := cond(st.Conditions, "Accepted"); a.Status != metav1.ConditionTrue || a.ObservedGeneration != 4 {
		t.Errorf("Accepted %+v", a)
	}
	if len(st.SupportedFeatures) != len(CoreFeatures)+len(ExtendedFeatures)+len(RouteFeatures) || st.SupportedFeatures[0].Name != "BackendTLSPolicy" ||
		!slices.IsSortedFunc(st.SupportedFeatures, func(a, b gatewayv1.SupportedFeature) int { return strings.Compare(string(a.Name), string(b.Name)) }) {
		t.Errorf("features %+v", st.SupportedFeatures)
	}
	for _, p := range []string{"avi", "bigip"} {
		got := FeaturesFor(p)
		if !slices.Contains(got, "TCPRoute") || slices.Contains(got, "TLSRoute") || slices.Contains(got, "GRPCRoute") ||
			slices.Contains(got, "BackendTLSPolicy") ||
			slices.Contains(got, "HTTPRoutePathRewrite") || !slices.IsSorted(got) {
			t.Errorf("%s features %v", p, got)
		}
	}
	if got := FeaturesFor("other"); !slices.Equal(got, CoreFeatures) {
		t.Errorf("features of a provider without a Gateway layout %v, want the core ones", got)
	}
	if !ClassOurs(c) || ClassOurs(&gatewayv1.GatewayClass{Spec: gatewayv1.GatewayClassSpec{ControllerName: "x/y"}}) {
		t.Error("ClassOurs")
	}
	gw := gateway()
	if !Ours(gw, []*gatewayv1.GatewayClass{c}) || Ours(gw, nil) {
		t.Error("Ours")
	}
}

func TestRouteRefs(t *testing.T) {
	r := route("r", 1, rule(nil, svcRef("b", 1), svcRef("a", 1), svcRef("a", 2)))
	if got := Backends(r); len(got) != 2 || got[0].Name != "a" {
		t.Errorf("Backends %v", got)
	}
	if got := Gateways(r); len(got) != 1 || got[0] != infraNS+"/gw" {
		t.Errorf("Gateways %v", got)
	}
}
