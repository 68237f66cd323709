package inputs

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// PoliciesServed reports whether the API server serves LoadBalancerPolicies
// (their CRD is installed).
func PoliciesServed(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == v1alpha1.Resource.Resource }), nil
}

// PoliciesFromAPI lists the LoadBalancerPolicies of namespace (all when
// empty), for nplctl.
func PoliciesFromAPI(ctx context.Context, client dynamic.Interface, namespace string) ([]*v1alpha1.LoadBalancerPolicy, error) {
	list, err := client.Resource(v1alpha1.Resource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list LoadBalancerPolicies: %w", err)
	}
	out := make([]*v1alpha1.LoadBalancerPolicy, 0, len(list.Items))
	for i := range list.Items {
		p, err := v1alpha1.FromUnstructured(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
