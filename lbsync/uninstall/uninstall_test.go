package uninstall

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/mock"
)

const testCluster = "c1"

var testInst = Installation{ClusterName: testCluster, Claim: claim.ClaimConfig{LoadBalancerClass: "npl.io/lb"}, IngressClass: "npl"}

// svcSpec builds a Service for the cleanup tests.
type svcSpec struct {
	name        string
	typ         corev1.ServiceType
	class       string
	annotations map[string]string
	finalizers  []string
	ingress     []string
	conditions  []string
}

func (s svcSpec) build() *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: s.name, Annotations: s.annotations, Finalizers: s.finalizers, ResourceVersion: "7"},
		Spec:       corev1.ServiceSpec{Type: s.typ, Selector: map[string]string{"app": s.name}},
	}
	if s.class != "" {
		svc.Spec.LoadBalancerClass = &s.class
	}
	for _, ip := range s.ingress {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	for _, c := range s.conditions {
		svc.Status.Conditions = append(svc.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test"})
	}
	return svc
}

// marks is what cleanup may change on a Service.
type marks struct {
	Annotations map[string]string
	Finalizers  []string
	Ingress     []string
	Conditions  []string
}

func marksOf(svc *corev1.Service) marks {
	m := marks{Annotations: svc.Annotations, Finalizers: svc.Finalizers}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		m.Ingress = append(m.Ingress, in.IP)
	}
	for _, c := range svc.Status.Conditions {
		m.Conditions = append(m.Conditions, c.Type)
	}
	return m
}

var (
	optIn        = map[string]string{contract.ServiceEnabledKey: "true"}
	ourOptIn     = map[string]string{contract.ServiceEnabledKey: "true", contract.AutoAnnotatedKey: "true"}
	ourClaim     = map[string]string{contract.ServiceEnabledKey: "true", contract.AutoAnnotatedKey: "true", contract.ClaimedByKey: testCluster}
	otherClaim   = map[string]string{contract.ServiceEnabledKey: "true", contract.AutoAnnotatedKey: "true", contract.ClaimedByKey: "c2"}
	ourFinalizer = []string{contract.CleanupFinalizer, "example.com/keep"}
)

// testServices are the Services of the cleanup tests and what must remain
// of each after a successful cleanup.
var testServices = []struct {
	spec svcSpec
	want marks
}{
	{ // ours as the controller leaves it: every mark goes (the claim
		// record too), other finalizers and conditions stay
		spec: svcSpec{name: "ours", typ: corev1.ServiceTypeLoadBalancer, class: "npl.io/lb", annotations: ourClaim,
			finalizers: ourFinalizer, ingress: []string{"198.18.100.1"}, conditions: []string{contract.SyncedConditionType, "example.com/Ready"}},
		want: marks{Annotations: map[string]string{}, Finalizers: []string{"example.com/keep"}, Conditions: []string{"example.com/Ready"}},
	},
	{ // the user's own opt-in stays
		spec: svcSpec{name: "user-opt-in", typ: corev1.ServiceTypeLoadBalancer, class: "npl.io/lb", annotations: optIn,
			finalizers: []string{contract.CleanupFinalizer}, ingress: []string{"198.18.100.2"}, conditions: []string{contract.SyncedConditionType}},
		want: marks{Annotations: optIn},
	},
	{ // a Service that stopped being ours but still has our finalizer
		spec: svcSpec{name: "was-ours", typ: corev1.ServiceTypeClusterIP, annotations: ourOptIn,
			finalizers: []string{contract.CleanupFinalizer}, ingress: []string{"198.18.100.3"}},
		want: marks{Annotations: map[string]string{}},
	},
	{ // another controller's load balancer keeps its status
		spec: svcSpec{name: "foreign", typ: corev1.ServiceTypeLoadBalancer, class: "other.io/lb", ingress: []string{"198.18.100.9"}},
		want: marks{Ingress: []string{"198.18.100.9"}},
	},
	{ // no class while defaultLoadBalancer is false: not ours
		spec: svcSpec{name: "no-class", typ: corev1.ServiceTypeLoadBalancer, ingress: []string{"198.18.100.10"}},
		want: marks{Ingress: []string{"198.18.100.10"}},
	},
	{ // another installation's claim: nothing of it is ours to remove
		spec: svcSpec{name: "other-installation", typ: corev1.ServiceTypeLoadBalancer, class: "other.io/lb", annotations: otherClaim,
			finalizers: []string{contract.CleanupFinalizer}, ingress: []string{"198.18.100.11"}, conditions: []string{contract.SyncedConditionType}},
		want: marks{Annotations: otherClaim, Finalizers: []string{contract.CleanupFinalizer}, Ingress: []string{"198.18.100.11"},
			Conditions: []string{contract.SyncedConditionType}},
	},
	{ // a ClusterIP Service with the user's opt-in is left alone
		spec: svcSpec{name: "plain", typ: corev1.ServiceTypeClusterIP, annotations: optIn},
		want: marks{Annotations: optIn},
	},
}

func newTestMock(t *testing.T, services ...string) *mock.Mock {
	t.Helper()
	pool := []netip.Prefix{netip.MustParsePrefix("198.18.100.0/28")}
	m, err := mock.New(mock.Config{Common: providers.Common{ClusterName: testCluster, VIPPool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range services {
		ns, name, _ := strings.Cut(svc, "/")
		lb := &lbmodel.LoadBalancer{
			Name: lbmodel.LoadBalancerName(testCluster, ns, name), Service: svc,
			Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "p"}}},
		}
		if _, err := m.Ensure(context.Background(), lb); err != nil {
			t.Fatalf("seed load balancer %s: %v", lb.Name, err)
		}
	}
	return m
}

func newTestClient(t *testing.T) *fake.Clientset {
	t.Helper()
	var objs []runtime.Object
	for _, s := range testServices {
		objs = append(objs, s.spec.build())
	}
	return fake.NewClientset(objs...)
}

func patchedServices(client *fake.Clientset) map[string]int {
	out := map[string]int{}
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "services" {
			out[p.GetName()]++
		}
	}
	return out
}

func TestCleanupCluster_deletesEveryLoadBalancerAndRemovesOurMarks(t *testing.T) {
	m := newTestMock(t, "shop/ours", "shop/user-opt-in", "shop/gone")
	client := newTestClient(t)
	ctx := context.Background()

	if err := Clean(ctx, client, m, testInst); err != nil {
		t.Fatalf("cleanup: %v", err)
	}

	lbs, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs) != 0 {
		t.Errorf("load balancers left after cleanup: %+v", lbs)
	}
	for _, s := range testServices {
		got, err := client.CoreV1().Services("shop").Get(ctx, s.spec.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s.want, marksOf(got), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("service %s after cleanup (-want +got):\n%s", s.spec.name, diff)
		}
	}
	patched := patchedServices(client)
	for _, name := range []string{"foreign", "no-class", "plain", "other-installation"} {
		if patched[name] != 0 {
			t.Errorf("service %s was patched %d times; it carries none of our marks", name, patched[name])
		}
	}
}

func TestCleanupCluster_isIdempotent(t *testing.T) {
	m := newTestMock(t, "shop/ours")
	client := newTestClient(t)
	ctx := context.Background()
	if err := Clean(ctx, client, m, testInst); err != nil {
		t.Fatalf("first cleanup: %v", err)
	}
	client.ClearActions()
	if err := Clean(ctx, client, m, testInst); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
	if patched := patchedServices(client); len(patched) != 0 {
		t.Errorf("a second cleanup patched services %v; want none", patched)
	}
}

// failingDelete fails Delete of one load balancer.
type failingDelete struct {
	providers.Provider
	name string
}

func (f failingDelete) Delete(ctx context.Context, name string, kind lbmodel.Kind) error {
	if name == f.name {
		return errors.New("controller unreachable")
	}
	return f.Provider.Delete(ctx, name, kind)
}

func TestCleanupCluster_keepsMarksOfServiceWhoseLoadBalancerRemains(t *testing.T) {
	m := newTestMock(t, "shop/ours", "shop/user-opt-in")
	stuck := lbmodel.LoadBalancerName(testCluster, "shop", "ours")
	client := newTestClient(t)
	ctx := context.Background()

	err := Clean(ctx, client, failingDelete{Provider: m, name: stuck}, testInst)
	if err == nil || !strings.Contains(err.Error(), stuck) || !strings.Contains(err.Error(), "controller unreachable") {
		t.Fatalf("cleanup error = %v; want the failed delete of %s reported", err, stuck)
	}
	lbs, _ := m.List(ctx)
	if len(lbs) != 1 || lbs[0].Name != stuck {
		t.Errorf("load balancers left = %+v; want only %s", lbs, stuck)
	}
	got, _ := client.CoreV1().Services("shop").Get(ctx, "ours", metav1.GetOptions{})
	if diff := cmp.Diff(marksOf(testServices[0].spec.build()), marksOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("service ours changed although its load balancer remains (-want +got):\n%s", diff)
	}
	got, _ = client.CoreV1().Services("shop").Get(ctx, "user-opt-in", metav1.GetOptions{})
	if diff := cmp.Diff(testServices[1].want, marksOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("service user-opt-in not cleaned (-want +got):\n%s", diff)
	}
}

// failingList fails List.
type failingList struct{ providers.Provider }

func (failingList) List(context.Context) ([]lbmodel.LoadBalancer, error) {
	return nil, errors.New("401 unauthorized")
}

func TestCleanupCluster_failedListTouchesNoService(t *testing.T) {
	client := newTestClient(t)
	err := Clean(context.Background(), client, failingList{newTestMock(t)}, testInst)
	if err == nil || !strings.Contains(err.Error(), "401 unauthorized") {
		t.Fatalf("cleanup error = %v; want the List failure", err)
	}
	if patched := patchedServices(client); len(patched) != 0 {
		t.Errorf("services patched after a failed List: %v", patched)
	}
}

func TestClearStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  svcSpec
		want string
	}{
		{"nothing of ours", svcSpec{typ: corev1.ServiceTypeLoadBalancer, class: "other.io/lb", ingress: []string{"198.18.1.1"}}, ""},
		{"condition only, other conditions kept", svcSpec{typ: corev1.ServiceTypeClusterIP, conditions: []string{"a", contract.SyncedConditionType}},
			`{"metadata":{"resourceVersion":"7"},"status":{"conditions":[{"type":"a","status":"True","lastTransitionTime":null,"reason":"Test","message":""}]}}`},
		{"last condition removes the list", svcSpec{typ: corev1.ServiceTypeClusterIP, conditions: []string{contract.SyncedConditionType}},
			`{"metadata":{"resourceVersion":"7"},"status":{"conditions":null}}`},
		{"our ingress", svcSpec{typ: corev1.ServiceTypeLoadBalancer, class: "npl.io/lb", ingress: []string{"198.18.1.1"}},
			`{"metadata":{"resourceVersion":"7"},"status":{"loadBalancer":{"ingress":null}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := scope{Installation: testInst}.clearStatus(tc.svc.build())
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStopWorkloads_scalesDeploymentToZeroAndDeletesDaemonSet(t *testing.T) {
	ns := "npl-system"
	replicas := int32(2)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "npl-lbsync"},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"c": "lbsync"}}},
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "npl-agent"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"c": "agent"}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}}},
	}
	pod := func(name, c string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"c": c}}}
	}
	client := fake.NewClientset(deploy, ds, pod("lbsync-1", "lbsync"), pod("lbsync-2", "lbsync"), pod("agent-1", "agent"), pod("other", "other"))
	// Stand in for the workload controllers: the call that stops a
	// workload removes its Pods.
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	stops := []struct {
		verb, resource string
		pods           []string
	}{{"patch", "deployments", []string{"lbsync-1", "lbsync-2"}}, {"delete", "daemonsets", []string{"agent-1"}}}
	for _, s := range stops {
		pods := s.pods
		client.PrependReactor(s.verb, s.resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			for _, p := range pods {
				_ = client.Tracker().Delete(podsGVR, ns, p)
			}
			return false, nil, nil
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := Workloads{Namespace: ns, Deployments: []string{"npl-lbsync", "missing"}, DaemonSets: []string{"npl-agent"},
		PollInterval: time.Millisecond}

	if err := StopWorkloads(ctx, client, opts); err != nil {
		t.Fatalf("stop: %v", err)
	}
	gotDeploy, _ := client.AppsV1().Deployments(ns).Get(ctx, "npl-lbsync", metav1.GetOptions{})
	if *gotDeploy.Spec.Replicas != 0 {
		t.Errorf("deployment replicas = %d; want 0", *gotDeploy.Spec.Replicas)
	}
	if _, err := client.AppsV1().DaemonSets(ns).Get(ctx, "npl-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get daemonset after stop: %v; want not found", err)
	}
	pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != "other" {
		t.Errorf("pods left = %v; want only the unrelated one", pods.Items)
	}
}

func TestStopWorkloads_reportsPodsThatDoNotStop(t *testing.T) {
	ns := "npl-system"
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "npl-lbsync"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"c": "lbsync"}}},
	}
	stuck := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lbsync-stuck", Labels: map[string]string{"c": "lbsync"}}}
	client := fake.NewClientset(deploy, stuck)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := StopWorkloads(ctx, client, Workloads{Namespace: ns, Deployments: []string{"npl-lbsync"}, PollInterval: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "lbsync-stuck") {
		t.Fatalf("stop error = %v; want it to name the Pod that did not stop", err)
	}
}

func TestDaemonSetDone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gen    int64
		status appsv1.DaemonSetStatus
		want   bool
	}{
		{"status not yet computed", 1, appsv1.DaemonSetStatus{}, false},
		{"no node to run on", 1, appsv1.DaemonSetStatus{ObservedGeneration: 1}, true},
		{"some nodes not ready", 1, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, NumberReady: 2, UpdatedNumberScheduled: 3}, false},
		{"ready everywhere", 1, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, NumberReady: 3, UpdatedNumberScheduled: 3}, true},
		{"ready but old generation", 2, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, NumberReady: 3, UpdatedNumberScheduled: 3}, false},
		{"old pods ready", 1, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, NumberReady: 3, UpdatedNumberScheduled: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen}, Status: tc.status}
			if got := daemonSetDone(ds); got != tc.want {
				t.Errorf("daemonSetDone = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestWaitDaemonSetReady_timesOutNamingNodesNotDone(t *testing.T) {
	ns := "npl-system"
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "npl-agent-cleanup", Generation: 1},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"c": "cleanup"}}},
		Status:     appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cleanup-x", Labels: map[string]string{"c": "cleanup"}},
		Spec: corev1.PodSpec{NodeName: "node-2"}}
	client := fake.NewClientset(ds, pod)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := WaitDaemonSetReady(ctx, client, ns, "npl-agent-cleanup", time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 nodes done") || !strings.Contains(err.Error(), "cleanup-x on node-2") {
		t.Fatalf("wait error = %v; want the count and the Pod not ready", err)
	}

	ds.Status.NumberReady = 2
	if _, err := client.AppsV1().DaemonSets(ns).UpdateStatus(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := WaitDaemonSetReady(ctx2, client, ns, "npl-agent-cleanup", time.Millisecond); err != nil {
		t.Errorf("wait on a daemonset ready everywhere: %v", err)
	}
}

// TestClean_keepsTheOptInAnotherInstallationsIngressUses: an opt-in we
// added stays while an Ingress of another npl installation's class sends
// requests to the Service; an Ingress of our own class does not keep it.
func TestClean_keepsTheOptInAnotherInstallationsIngressUses(t *testing.T) {
	class := func(name string) *networkingv1.IngressClass {
		return &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
	}
	ing := func(name, class, backend string) *networkingv1.Ingress {
		return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: networkingv1.IngressSpec{IngressClassName: &class, DefaultBackend: &networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: backend, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
	}
	backend := func(name string) *corev1.Service {
		return svcSpec{name: name, typ: corev1.ServiceTypeClusterIP, annotations: ourOptIn}.build()
	}
	client := fake.NewClientset(class("npl"), class("npl-b"),
		ing("ours", "npl", "mine"), ing("theirs", "npl-b", "shared"),
		backend("mine"), backend("shared"))
	if err := Clean(context.Background(), client, newTestMock(t), testInst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"mine": false, "shared": true} {
		got, err := client.CoreV1().Services("shop").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if opted := contract.ServiceEnabled(got.Annotations); opted != want {
			t.Errorf("service %s after cleanup: opted in %v; want %v", name, opted, want)
		}
	}
}
