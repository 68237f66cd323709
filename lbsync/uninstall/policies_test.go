package uninstall

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// entry is a status entry of controller for a target of kind.
func entry(controller, kind, name string) v1alpha1.PolicyAncestorStatus {
	return v1alpha1.PolicyAncestorStatus{
		AncestorRef:    v1alpha1.ObjectReference{Kind: kind, Namespace: "shop", Name: name},
		ControllerName: controller,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonAccepted, LastTransitionTime: metav1.Unix(1, 0)}},
	}
}

// policyClients are the clients of a cluster with services and policies,
// whose API server serves the LoadBalancerPolicy CRD when served.
func policyClients(t *testing.T, served bool, services []*corev1.Service, policies ...*v1alpha1.LoadBalancerPolicy) (*fake.Clientset, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	objs := make([]runtime.Object, 0, len(services))
	for _, s := range services {
		objs = append(objs, s)
	}
	client := fake.NewClientset(objs...)
	if served {
		client.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
			GroupVersion: v1alpha1.SchemeGroupVersion.String(), APIResources: []metav1.APIResource{{Name: v1alpha1.Resource.Resource}},
		}}
	}
	var pobjs []runtime.Object
	for _, p := range policies {
		u, err := v1alpha1.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		pobjs = append(pobjs, u)
	}
	// A scheme without the typed policy: the fake lists unstructured ones.
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "LoadBalancerPolicyList"}, pobjs...)
	return client, dyn
}

func statusPolicy(name string, entries ...v1alpha1.PolicyAncestorStatus) *v1alpha1.LoadBalancerPolicy {
	return &v1alpha1.LoadBalancerPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Status:     v1alpha1.PolicyStatus{Ancestors: entries},
	}
}

// Cleanup removes this installation's entries (its controller name,
// whatever the target) and leaves other controllers' entries and those of
// another installation (c2); a policy with nothing of ours is not written.
func TestCleanPolicies_removesExactlyOurEntries(t *testing.T) {
	other := "example.com/other-controller"
	services := []*corev1.Service{
		svcSpec{name: "web", annotations: map[string]string{contract.ClaimedByKey: testCluster}}.build(),
		svcSpec{name: "plain"}.build(),
		svcSpec{name: "theirs", annotations: map[string]string{contract.ClaimedByKey: "c2"}}.build(),
	}
	ours, c2 := v1alpha1.ControllerNameOf(testCluster), v1alpha1.ControllerNameOf("c2")
	mixed := statusPolicy("mixed",
		entry(other, v1alpha1.KindService, "web"),
		entry(ours, v1alpha1.KindService, "web"),
		entry(ours, v1alpha1.KindService, "plain"),
		entry(ours, v1alpha1.KindService, "gone"),
		entry(c2, v1alpha1.KindService, "theirs"),
		entry(c2, v1alpha1.KindService, "plain"),
		entry(ours, v1alpha1.KindGateway, "gw"),
	)
	foreign := statusPolicy("foreign", entry(other, v1alpha1.KindGateway, "gw"))
	client, dyn := policyClients(t, true, services, mixed, foreign)

	if err := CleanPolicies(context.Background(), client, dyn, testInst); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []v1alpha1.PolicyAncestorStatus {
		u, err := dyn.Resource(v1alpha1.Resource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := v1alpha1.FromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		return p.Status.Ancestors
	}
	want := []v1alpha1.PolicyAncestorStatus{
		entry(other, v1alpha1.KindService, "web"),
		entry(c2, v1alpha1.KindService, "theirs"),
		entry(c2, v1alpha1.KindService, "plain"),
	}
	if diff := cmp.Diff(want, read("mixed")); diff != "" {
		t.Errorf("mixed's entries after cleanup (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(foreign.Status.Ancestors, read("foreign")); diff != "" {
		t.Errorf("foreign's entries after cleanup (-want +got):\n%s", diff)
	}
	var writes []string
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "update" {
			writes = append(writes, a.GetSubresource())
		}
	}
	if diff := cmp.Diff([]string{"status"}, writes); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}

	// Idempotent: nothing of ours is left to remove.
	dyn.ClearActions()
	if err := CleanPolicies(context.Background(), client, dyn, testInst); err != nil {
		t.Fatal(err)
	}
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("second cleanup wrote %v", a)
		}
	}
}

// Without the CRD there is nothing to clean, and nothing is asked of it.
func TestCleanPolicies_withoutTheCRD(t *testing.T) {
	client, dyn := policyClients(t, false, nil)
	if err := CleanPolicies(context.Background(), client, dyn, testInst); err != nil {
		t.Fatal(err)
	}
	if a := dyn.Actions(); len(a) != 0 {
		t.Errorf("actions without the CRD: %v", a)
	}
}
