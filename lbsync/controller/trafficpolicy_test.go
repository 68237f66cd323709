package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// A Gateway's sync writes its entry of the status.ancestors of the
// XBackendTrafficPolicies it has results for, leaves a policy whose entry
// is as wanted unwritten, and removes its entry from a policy it has no
// result for any more, keeping another controller's.
func TestTrafficPolicyKind_writeStatuses(t *testing.T) {
	ctx := context.Background()
	theirs := gatewayv1.PolicyAncestorStatus{AncestorRef: gatewayv1.ParentReference{Name: "gw"}, ControllerName: "example.org/other",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}}}
	p := &gatewayxv1a1.XBackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sticky", UID: "u1", Generation: 2},
		Spec:   gatewayxv1a1.BackendTrafficPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Kind: "Service", Name: "web"}}},
		Status: gatewayv1.PolicyStatus{Ancestors: []gatewayv1.PolicyAncestorStatus{theirs}}}
	client := gatewayfake.NewSimpleClientset(p)
	k := (&Controller{}).newTrafficPolicyKind(gatewayinformers.NewSharedInformerFactory(client, 0), client)
	if err := k.informer.GetIndexer().Add(p); err != nil {
		t.Fatal(err)
	}
	if got := k.byIndex(gwPolicyTargetIndex, "shop/web"); len(got) != 1 {
		t.Fatalf("policies of shop/web: %v", got)
	}
	var w ownWrites
	key := gatewayKey("shop", "gw")
	accepted := []gateway.PolicyResult{{Namespace: "shop", Name: "sticky", Conditions: []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "Accepted for Service shop/web", ObservedGeneration: 2}}}}
	if err := k.writeStatuses(ctx, &w, key, accepted); err != nil {
		t.Fatal(err)
	}
	got, err := client.ExperimentalV1alpha1().XBackendTrafficPolicies("shop").Get(ctx, "sticky", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Ancestors) != 2 || got.Status.Ancestors[1].ControllerName != gateway.ControllerName ||
		got.Status.Ancestors[1].Conditions[0].Reason != "Accepted" || got.Status.Ancestors[0].ControllerName != theirs.ControllerName {
		t.Fatalf("ancestors after the write: %+v", got.Status.Ancestors)
	}
	if err := k.informer.GetIndexer().Update(got); err != nil {
		t.Fatal(err)
	}
	w.observed(got)
	writes := len(client.Actions())
	if err := k.writeStatuses(ctx, &w, key, accepted); err != nil {
		t.Fatal(err)
	}
	if n := len(client.Actions()) - writes; n != 0 {
		t.Errorf("an unchanged entry: %d writes", n)
	}
	if err := k.writeStatuses(ctx, &w, key, nil); err != nil {
		t.Fatal(err)
	}
	if got, err = client.ExperimentalV1alpha1().XBackendTrafficPolicies("shop").Get(ctx, "sticky", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Ancestors) != 1 || got.Status.Ancestors[0].ControllerName != theirs.ControllerName {
		t.Errorf("ancestors after the Gateway left: %+v", got.Status.Ancestors)
	}
}
