package lbsync

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// nplMarks lists every npl.io key, finalizer and condition an object still
// carries, so that a failure names what uninstall left behind.
func nplMarks(meta metav1.ObjectMeta, conditions []metav1.Condition) []string {
	var out []string
	for k := range meta.Annotations {
		if strings.HasPrefix(k, "npl.io/") {
			out = append(out, "annotation "+k)
		}
	}
	for _, f := range meta.Finalizers {
		if strings.HasPrefix(f, "npl.io/") {
			out = append(out, "finalizer "+f)
		}
	}
	for _, c := range conditions {
		if strings.HasPrefix(c.Type, "npl.io/") {
			out = append(out, "condition "+c.Type)
		}
	}
	slices.Sort(out)
	return out
}

// TestLBSync_uninstallLeavesNoMark lets a real npl-lbsync serve a
// LoadBalancer Service and an Ingress (whose backends it opts in), stops it
// as the chart's uninstall hook does, runs `npl-lbsync cleanup`, and then
// requires that no object carries an npl.io key, finalizer or condition, that
// the opt-ins npl-lbsync added are gone while the user's own remains, that
// the load balancers are deleted, that a policy of the Service keeps no
// entry of npl-lbsync's but another controller's, and that the Ingress
// deletes at once.
func TestLBSync_uninstallLeavesNoMark(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	ctx := lbsyncbed.Context(t, 3*time.Minute)
	const cluster, ingClass = "it-un", "npl-un"
	class := "npl.io/un"

	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: ingClass}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
	if _, err := e.Client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.NetworkingV1().IngressClasses().Delete(context.Background(), ingClass, metav1.DeleteOptions{})
	})

	e.Pod(t, ns, "web-1", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61001, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "lb", &class))
	backend := func(name string, ann map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
			Spec: corev1.ServiceSpec{Selector: lbsyncbed.WebLabels, Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
		}
	}
	e.CreateService(t, backend("backend", nil))
	e.CreateService(t, backend("user", map[string]string{contract.ServiceEnabledKey: "true"}))
	path := func(p, svc string) networkingv1.HTTPIngressPath {
		pt := networkingv1.PathTypePrefix
		return networkingv1.HTTPIngressPath{Path: p, PathType: &pt, Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}}
	}
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "ing", Namespace: ns},
		Spec: networkingv1.IngressSpec{IngressClassName: ptr.To(ingClass), Rules: []networkingv1.IngressRule{{
			Host: "web.example",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{path("/a", "backend"), path("/b", "user")}}},
		}}},
	}
	if _, err := e.Client.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened, let the objects go with the namespace.
		for _, n := range []string{"lb", "backend", "user"} {
			_, _ = e.Client.CoreV1().Services(ns).Patch(context.Background(), n, "application/merge-patch+json",
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		_, _ = e.Client.NetworkingV1().Ingresses(ns).Patch(context.Background(), "ing", "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})

	cfgText := e.Config(cluster, "NodePortLocal", class, "198.18.101.0/28") + "ingressClass: " + ingClass + "\n"
	l, err := stack.StartLBSync(ctx, e.Cluster, stack.LBSyncOptions{Name: "npl-lbsync-uninstall", Config: cfgText})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop() })

	// The state the real controller leaves: claimed, opted in, served.
	lbsyncbed.WaitFor(t, 60*time.Second, "npl-lbsync to serve the Service and the Ingress", func() (bool, error) {
		svc, err := e.Client.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		be, err := e.Client.CoreV1().Services(ns).Get(ctx, "backend", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, err := e.Client.NetworkingV1().Ingresses(ns).Get(ctx, "ing", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(svc.Status.LoadBalancer.Ingress) == 1 && svc.Annotations[contract.ClaimedByKey] == cluster &&
			slices.Contains(svc.Finalizers, contract.CleanupFinalizer) &&
			be.Annotations[contract.AutoAnnotatedKey] == "true" &&
			len(got.Status.LoadBalancer.Ingress) == 1 && got.Annotations[contract.ClaimedByKey] == cluster &&
			slices.Contains(got.Finalizers, contract.CleanupFinalizer), nil
	})
	st, err := l.MockState()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.LoadBalancers) != 2 {
		t.Fatalf("load balancers before uninstall: %d; want 2 (the Service's and the Ingress's)", len(st.LoadBalancers))
	}
	// A policy of the Service, with the entry npl-lbsync writes and one of
	// another controller.
	if err := e.CreatePolicy(t, policyFor(ns, "un", "lb", v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](5)})); err != nil {
		t.Fatal(err)
	}
	e.WaitPolicyCondition(t, ns, "un", "Service", "lb", metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	foreign := v1alpha1.PolicyAncestorStatus{
		AncestorRef:    v1alpha1.ObjectReference{Kind: v1alpha1.KindService, Namespace: ns, Name: "lb"},
		ControllerName: "example.com/other-controller",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonAccepted, LastTransitionTime: metav1.Now()}},
	}
	lbsyncbed.WaitFor(t, 20*time.Second, "the other controller's entry to be written", func() (bool, error) {
		p := e.Policy(t, ns, "un")
		p.Status.Ancestors = append(p.Status.Ancestors, foreign)
		_, err := e.Policies(t).Namespace(ns).UpdateStatus(ctx, lbsyncbed.PolicyObject(t, p), metav1.UpdateOptions{})
		return err == nil, err
	})

	// Uninstall: npl-lbsync stopped, then its cleanup.
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "npl-lbsync"), "cleanup", "--config", l.ConfigPath,
		"--kubeconfig", e.Cluster.Kubeconfig(), "--namespace", ns, "--timeout", "60s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npl-lbsync cleanup: %v\n%s", err, out)
	}

	// npl-lbsync is stopped: ask the provider as cleanup does, from the
	// same configuration (the mock keeps its state in a file).
	cfg, err := config.Load(l.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	provider, err := cfg.Provider().Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lbs, err := provider.List(ctx); err != nil || len(lbs) != 0 {
		t.Errorf("load balancers after uninstall: %v, %v; want none", lbs, err)
	}
	for _, name := range []string{"lb", "backend", "user"} {
		svc := e.Service(t, ns, name)
		if m := nplMarks(svc.ObjectMeta, svc.Status.Conditions); len(m) != 0 {
			t.Errorf("service %s after uninstall still carries %v", name, m)
		}
		wantOptIn := name == "user" // the user's own opt-in stays
		if got := contract.ServiceEnabled(svc.Annotations); got != wantOptIn {
			t.Errorf("service %s after uninstall: opted in %v; want %v", name, got, wantOptIn)
		}
		if name == "lb" && len(svc.Status.LoadBalancer.Ingress) != 0 {
			t.Errorf("service lb after uninstall: status %v; want no load balancer ingress", svc.Status.LoadBalancer.Ingress)
		}
	}
	// The policy keeps the other controller's entry (and the shared
	// npl-lbsync's, another installation) and none of the uninstalled
	// npl-lbsync's.
	p := e.Policy(t, ns, "un")
	if !slices.ContainsFunc(p.Status.Ancestors, func(a v1alpha1.PolicyAncestorStatus) bool { return a.ControllerName == foreign.ControllerName }) {
		t.Errorf("policy after uninstall lost the other controller's entry: %+v", p.Status.Ancestors)
	}
	if c := lbsyncbed.PolicyConditions(p, "Service", "lb")[v1alpha1.ControllerNameOf(cluster)]; c != nil {
		t.Errorf("policy after uninstall keeps the uninstalled npl-lbsync's entry: %+v", c)
	}
	got, err := e.Client.NetworkingV1().Ingresses(ns).Get(ctx, "ing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := nplMarks(got.ObjectMeta, nil); len(m) != 0 {
		t.Errorf("ingress after uninstall still carries %v", m)
	}
	if len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("ingress after uninstall: status %v; want no load balancer ingress", got.Status.LoadBalancer.Ingress)
	}

	// With nothing of ours left on it, an Ingress deletes at once.
	if err := e.Client.NetworkingV1().Ingresses(ns).Delete(ctx, "ing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 5*time.Second, "the Ingress to be gone after its deletion", func() (bool, error) {
		_, err := e.Client.NetworkingV1().Ingresses(ns).Get(ctx, "ing", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
