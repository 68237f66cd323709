package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// FromUnstructured decodes a policy the dynamic client read.
func FromUnstructured(u *unstructured.Unstructured) (*LoadBalancerPolicy, error) {
	p := &LoadBalancerPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, fmt.Errorf("decode LoadBalancerPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return p, nil
}

// ToUnstructured encodes a policy, with its apiVersion and kind, for the
// dynamic client.
func ToUnstructured(p *LoadBalancerPolicy) (*unstructured.Unstructured, error) {
	p = p.DeepCopy()
	p.APIVersion, p.Kind = SchemeGroupVersion.String(), Kind
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, fmt.Errorf("encode LoadBalancerPolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	return &unstructured.Unstructured{Object: u}, nil
}
