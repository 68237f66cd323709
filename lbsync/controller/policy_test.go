package controller

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// policyController is a controller with LoadBalancerPolicies served by a
// fake dynamic client holding policies, whose caches hold services and
// policies (nothing runs).
func policyController(t *testing.T, services []*corev1.Service, policies ...*v1alpha1.LoadBalancerPolicy) (*Controller, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := make([]runtime.Object, 0, len(policies))
	for _, p := range policies {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: u})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "LoadBalancerPolicyList"}, objs...)
	c := New(Settings{ClusterName: "c1", Claim: claim.ClaimConfig{LoadBalancerClass: "npl.io/lb"}}, fake.NewClientset(), failing{}, NewMetrics(prometheus.NewRegistry()))
	c.EnablePolicies(dyn)
	for _, s := range services {
		if err := c.store.Services.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range policies {
		if err := c.polState().informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return c, dyn
}

func testPolicy(name string, generation int64, targets []v1alpha1.LocalPolicyTargetReference, tp v1alpha1.TrafficPolicy) *v1alpha1.LoadBalancerPolicy {
	return &v1alpha1.LoadBalancerPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), Generation: generation},
		Spec:       v1alpha1.LoadBalancerPolicySpec{TargetRefs: targets, TrafficPolicy: tp},
	}
}

// writtenStatus is the policy's status in the fake API.
func writtenStatus(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) v1alpha1.PolicyStatus {
	t.Helper()
	u, err := dyn.Resource(v1alpha1.Resource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.LoadBalancerPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

func svcRef(name string) v1alpha1.LocalPolicyTargetReference {
	return v1alpha1.LocalPolicyTargetReference{Kind: v1alpha1.KindService, Name: name}
}

// The status names each target's outcome: a Service not served, one of
// another installation (no entry of ours: its npl-lbsync writes it), a
// Gateway without the Gateway API.
func TestPolicyReconciler_targetsNotServed(t *testing.T) {
	mine := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "plain"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "theirs",
		Annotations: map[string]string{contract.ClaimedByKey: "other"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("npl.io/other")}}
	p := testPolicy("p", 1, []v1alpha1.LocalPolicyTargetReference{svcRef("plain"), svcRef("theirs"),
		{Group: v1alpha1.GroupGateway, Kind: v1alpha1.KindGateway, Name: "gw"}}, v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](5)})
	c, dyn := policyController(t, []*corev1.Service{mine, theirs}, p)
	if res := c.policies.sync(context.Background(), policyKey("shop", "p")); res.state != syncDone {
		t.Fatalf("sync: %+v", res)
	}
	got := map[string]string{}
	for _, a := range writtenStatus(t, dyn, "p").Ancestors {
		got[a.AncestorRef.Kind+"/"+a.AncestorRef.Name] = a.Conditions[0].Reason + ": " + a.Conditions[0].Message
	}
	want := map[string]string{
		"Service/plain": "TargetNotFound: Service shop/plain is not served by npl-lbsync: it is neither a LoadBalancer Service of its class nor a backend of its Ingresses or Gateway routes",
		"Gateway/gw":    "TargetNotFound: Gateway shop/gw: npl-lbsync does not serve the Gateway API",
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
}

// A policy whose new generation cannot be applied keeps its last valid
// spec applied, says so, and its index stays that spec's.
func TestPolicyState_keepsTheLastValidSpec(t *testing.T) {
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("npl.io/lb"),
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	valid := testPolicy("p", 1, []v1alpha1.LocalPolicyTargetReference{svcRef("web")},
		v1alpha1.TrafficPolicy{HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "/ok"}})
	c, dyn := policyController(t, []*corev1.Service{web}, valid)
	target := lbpolicy.ServiceTarget("shop", "web")
	if tp := c.polState().lookup(target); tp == nil || tp.HealthCheck.Path != "/ok" {
		t.Fatalf("lookup %+v", tp)
	}
	// Generation 2 targets another Service with a path no check takes.
	invalid := testPolicy("p", 2, []v1alpha1.LocalPolicyTargetReference{svcRef("api")},
		v1alpha1.TrafficPolicy{HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "ok"}})
	if err := c.polState().informer.GetIndexer().Update(invalid); err != nil {
		t.Fatal(err)
	}
	if tp := c.polState().lookup(target); tp == nil || tp.HealthCheck.Path != "/ok" {
		t.Errorf("lookup after the invalid generation %+v, want the last valid spec", tp)
	}
	if tp := c.polState().lookup(lbpolicy.ServiceTarget("shop", "api")); tp != nil {
		t.Errorf("the invalid spec's target got %+v", tp)
	}
	if res := c.policies.sync(context.Background(), policyKey("shop", "p")); res.state != syncDone {
		t.Fatalf("sync: %+v", res)
	}
	// web, which the last valid spec targets, reads Invalid; api, which
	// does not exist, TargetNotFound.
	want := map[string]string{
		"web": `Invalid: health check path "ok" does not start with / or holds a blank or control character; its last valid spec stays applied`,
		"api": "TargetNotFound: Service shop/api not found",
	}
	ancestors := writtenStatus(t, dyn, "p").Ancestors
	for _, a := range ancestors {
		c := a.Conditions[0]
		if got := c.Reason + ": " + c.Message; got != want[a.AncestorRef.Name] || c.ObservedGeneration != 2 {
			t.Errorf("%s: %q (generation %d), want %q of generation 2", a.AncestorRef.Name, got, c.ObservedGeneration, want[a.AncestorRef.Name])
		}
	}
	if len(ancestors) != len(want) {
		t.Errorf("%d entries, want %d", len(ancestors), len(want))
	}
}

// queued drains the controller's queue (nothing runs its workers).
func queued(c *Controller) map[queueKey]bool {
	out := map[queueKey]bool{}
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Done(k)
		out[k] = true
	}
	return out
}

// A started controller serves the policies once their CRD is served, and
// queues each policy and its targets, whose pools then get it; when the
// CRD goes it stops, and queues the targets again, whose pools lose it.
func TestController_servesPoliciesWhileTheCRDIs(t *testing.T) {
	p := testPolicy("p", 1, []v1alpha1.LocalPolicyTargetReference{svcRef("web")},
		v1alpha1.TrafficPolicy{HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "/ok"}})
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	// A scheme without the typed policy: the fake lists unstructured ones.
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "LoadBalancerPolicyList"}, &unstructured.Unstructured{Object: u})
	c := New(Settings{ClusterName: "c1", Claim: claim.ClaimConfig{LoadBalancerClass: "npl.io/lb"}}, fake.NewClientset(), failing{}, NewMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if c.PoliciesServed() {
		t.Fatal("policies served before their CRD")
	}
	target := lbpolicy.ServiceTarget("shop", "web")
	want := map[queueKey]bool{policyKey("shop", "p"): true, serviceKey("shop", "web"): true}

	if err := c.ServePolicies(ctx, dyn); err != nil {
		t.Fatal(err)
	}
	if !c.PoliciesServed() {
		t.Fatal("policies not served after ServePolicies")
	}
	if tp := c.polState().lookup(target); tp == nil || tp.HealthCheck.Path != "/ok" {
		t.Errorf("lookup %+v, want the policy", tp)
	}
	if got := queued(c); !cmp.Equal(got, want) {
		t.Errorf("queued when served %v, want %v", got, want)
	}

	c.StopPolicies()
	if c.PoliciesServed() {
		t.Fatal("policies served after StopPolicies")
	}
	if got := queued(c); !cmp.Equal(got, want) {
		t.Errorf("queued when stopped %v, want %v", got, want)
	}
	c.StopPolicies() // stopping twice is harmless
}
