package uninstall

import (
	"context"
	"errors"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// CleanPolicies removes the installation's entries from the status of
// every LoadBalancerPolicy: those of its controller name
// (v1alpha1.ControllerNameOf), with the rule the controller writes them by
// (lbpolicy.Ancestors); other controllers' entries, and another
// installation's, stay. Without the CRD there is nothing to clean.
func CleanPolicies(ctx context.Context, client kubernetes.Interface, policies dynamic.Interface, inst Installation) error {
	served, err := inputs.PoliciesServed(client.Discovery())
	if err != nil || !served {
		return err
	}
	list, err := inputs.PoliciesFromAPI(ctx, policies, metav1.NamespaceAll)
	if err != nil {
		return err
	}
	s := policyScope{policies: policies.Resource(v1alpha1.Resource), inst: inst}
	var errs []error
	cleaned := 0
	for _, p := range list {
		changed, err := s.clean(ctx, p)
		if err != nil {
			errs = append(errs, err)
		} else if changed {
			cleaned++
			klog.FromContext(ctx).Info("Cleaned LoadBalancerPolicy status", "policy", klog.KObj(p))
		}
	}
	klog.FromContext(ctx).Info("LoadBalancerPolicy cleanup done", "policiesCleaned", cleaned, "errors", len(errs))
	return errors.Join(errs...)
}

// policyScope is where cleaning a policy's status writes, and for which
// installation.
type policyScope struct {
	policies dynamic.NamespaceableResourceInterface
	inst     Installation
}

// clean writes the policy's status without the installation's entries,
// reading it again on a conflict; a policy deleted meanwhile has nothing
// left to clean.
func (s policyScope) clean(ctx context.Context, p *v1alpha1.LoadBalancerPolicy) (changed bool, err error) {
	cur, refetch := p, false
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if refetch {
			fresh, err := s.get(ctx, p.Namespace, p.Name)
			if err != nil {
				return err
			}
			cur = fresh
		}
		refetch = true
		kept := s.kept(cur.Status.Ancestors)
		if apiequality.Semantic.DeepEqual(kept, cur.Status.Ancestors) {
			return nil
		}
		upd := cur.DeepCopy()
		upd.Status.Ancestors = kept
		u, err := v1alpha1.ToUnstructured(upd)
		if err != nil {
			return err
		}
		// The resourceVersion read makes a concurrent change a conflict.
		if _, err := s.policies.Namespace(p.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if apierrors.IsNotFound(err) {
		return changed, nil
	}
	if err != nil {
		return changed, fmt.Errorf("clean up LoadBalancerPolicy %s/%s status: %w", p.Namespace, p.Name, err)
	}
	return changed, nil
}

// get reads a policy.
func (s policyScope) get(ctx context.Context, namespace, name string) (*v1alpha1.LoadBalancerPolicy, error) {
	u, err := s.policies.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return v1alpha1.FromUnstructured(u)
}

// kept returns the entries that stay: lbpolicy.Ancestors with nothing
// desired, which leaves out exactly the installation's own.
func (s policyScope) kept(current []v1alpha1.PolicyAncestorStatus) []v1alpha1.PolicyAncestorStatus {
	return lbpolicy.Ancestors(current, v1alpha1.ControllerNameOf(s.inst.ClusterName), nil, metav1.Time{})
}
