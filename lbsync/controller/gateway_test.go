package controller

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

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

// A Gateway is synced again for its certificate Secrets while one is
// missing (soon) or may not be read (less often: the right to read may be
// granted without a restart).
func TestSecretRetry(t *testing.T) {
	for _, tt := range []struct {
		missing   bool
		forbidden []string
		want      time.Duration
	}{
		{false, nil, 0},
		{true, nil, missingSecretRetry},
		{false, []string{"shop/tls"}, forbiddenSecretRetry},
		{true, []string{"shop/tls"}, missingSecretRetry},
	} {
		if got := secretRetry(tt.missing, tt.forbidden); got != tt.want {
			t.Errorf("secretRetry(%v, %v) = %v, want %v", tt.missing, tt.forbidden, got, tt.want)
		}
	}
}

// The Warning Event of a TLS Secret npl-lbsync may not read fires when the
// set of such Secrets changes, not on every poll.
func TestTellForbidden_oncePerChange(t *testing.T) {
	c := New(Settings{ClusterName: "c1"}, fake.NewClientset(), failing{}, NewMetrics(prometheus.NewRegistry()))
	rec := record.NewFakeRecorder(100)
	c.recorder = rec
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"}}
	for _, step := range []struct {
		forbidden []string
		events    int
	}{
		{[]string{"shop/tls"}, 1},
		{[]string{"shop/tls"}, 0},
		{[]string{"shop/tls"}, 0},
		{nil, 0},
		{[]string{"shop/tls"}, 1},
		{[]string{"shop/tls", "shop/other"}, 2},
		{[]string{"shop/tls", "shop/other"}, 0},
	} {
		c.gateways.tellForbidden(gw, step.forbidden)
		if got := len(rec.Events); got != step.events {
			t.Errorf("forbidden %v: %d Events, want %d", step.forbidden, got, step.events)
		}
		for len(rec.Events) > 0 {
			if e := <-rec.Events; !strings.Contains(e, "TLSSecretForbidden") {
				t.Errorf("Event %q", e)
			}
		}
	}
}
