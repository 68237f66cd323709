package lbsyncbed

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// Policies is the client of LoadBalancerPolicies.
func (e *Env) Policies(t *testing.T) dynamic.NamespaceableResourceInterface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(v1alpha1.Resource)
}

// PolicyObject is p as the dynamic client sends it.
func PolicyObject(t *testing.T, p *v1alpha1.LoadBalancerPolicy) *unstructured.Unstructured {
	t.Helper()
	p = p.DeepCopy()
	p.APIVersion, p.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// WithoutPolicyCRD deletes the LoadBalancerPolicy CRD, and with it every
// policy, until the end of the test, which installs it again: for what
// npl-lbsync does when it is installed after its start, or deleted.
func (e *Env) WithoutPolicyCRD(t *testing.T) {
	t.Helper()
	ctx := Context(t, time.Minute)
	if err := e.Cluster.DeleteCRDs(ctx, v1alpha1.CRDName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Cluster.InstallLoadBalancerPolicyCRD(ctx); err != nil {
			t.Errorf("install the LoadBalancerPolicy CRD again: %v", err)
		}
	})
	// npl-lbsync asks discovery, which may lag behind the CRD's deletion.
	WaitFor(t, 30*time.Second, "discovery to no longer serve LoadBalancerPolicies", func() (bool, error) {
		served, err := inputs.PoliciesServed(e.Client.Discovery())
		return !served, err
	})
}

// CreatePolicy creates p, or returns why the API server refused it.
func (e *Env) CreatePolicy(t *testing.T, p *v1alpha1.LoadBalancerPolicy) error {
	t.Helper()
	_, err := e.Policies(t).Namespace(p.Namespace).Create(Context(t, 30*time.Second), PolicyObject(t, p), metav1.CreateOptions{})
	return err
}

// Policy reads a policy.
func (e *Env) Policy(t *testing.T, ns, name string) *v1alpha1.LoadBalancerPolicy {
	t.Helper()
	u, err := e.Policies(t).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get LoadBalancerPolicy %s/%s: %v", ns, name, err)
	}
	p := &v1alpha1.LoadBalancerPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// UpdatePolicy applies mutate to the current policy, retrying conflicts,
// and returns why the API server refused the update.
func (e *Env) UpdatePolicy(t *testing.T, ns, name string, mutate func(*v1alpha1.LoadBalancerPolicy)) error {
	t.Helper()
	for {
		p := e.Policy(t, ns, name)
		mutate(p)
		_, err := e.Policies(t).Namespace(ns).Update(context.Background(), PolicyObject(t, p), metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// PolicyConditions returns the Accepted conditions npl-lbsync installations
// wrote in the policy for a target, by their controllerName
// (v1alpha1.ControllerNameOf): the bed's shared npl-lbsync and a test's
// own each write theirs.
func PolicyConditions(p *v1alpha1.LoadBalancerPolicy, kind, name string) map[string]*metav1.Condition {
	out := map[string]*metav1.Condition{}
	for _, a := range p.Status.Ancestors {
		if strings.HasPrefix(a.ControllerName, v1alpha1.ControllerName+"/") && a.AncestorRef.Kind == kind && a.AncestorRef.Name == name {
			for i := range a.Conditions {
				if a.Conditions[i].Type == v1alpha1.ConditionAccepted {
					out[a.ControllerName] = &a.Conditions[i]
				}
			}
		}
	}
	return out
}

// WaitPolicyCondition waits until an installation's condition in the policy
// for a target has the status and reason, and returns it.
func (e *Env) WaitPolicyCondition(t *testing.T, ns, name, kind, target string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	WaitFor(t, 20*time.Second, "policy "+name+" "+string(status)+"/"+reason+" for "+kind+" "+target, func() (bool, error) {
		for _, got := range PolicyConditions(e.Policy(t, ns, name), kind, target) {
			if got.Status == status && got.Reason == reason {
				c = got
				return true, nil
			}
		}
		return false, nil
	})
	return c
}

// PoolPolicies returns the mock's policies of a Service's load balancer's
// pools, by pool name.
func PoolPolicies(l *Syncer, ns, svc string) (map[string]*lbmodel.Policy, bool, error) {
	st, err := l.MockState()
	if err != nil {
		return nil, false, err
	}
	lb, ok := stack.FindLoadBalancer(st, lbmodel.LoadBalancerName(l.ClusterName, ns, svc))
	if !ok {
		return nil, false, nil
	}
	out := map[string]*lbmodel.Policy{}
	for _, li := range lb.Listeners {
		out[li.Pool.Name] = li.Pool.Policy
	}
	return out, true, nil
}
