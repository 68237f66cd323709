package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The DeepCopy methods are written by hand: the types are few and small.
// TestDeepCopy_sharesNothing checks that a copy shares no memory with the
// original, field by field, so a field added without its copy fails it.

// DeepCopyInto copies p into out.
func (p *LoadBalancerPolicy) DeepCopyInto(out *LoadBalancerPolicy) {
	*out = *p
	out.TypeMeta = p.TypeMeta
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	p.Spec.DeepCopyInto(&out.Spec)
	p.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of p.
func (p *LoadBalancerPolicy) DeepCopy() *LoadBalancerPolicy {
	if p == nil {
		return nil
	}
	out := new(LoadBalancerPolicy)
	p.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of p as a runtime.Object.
func (p *LoadBalancerPolicy) DeepCopyObject() runtime.Object {
	if c := p.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies l into out.
func (l *LoadBalancerPolicyList) DeepCopyInto(out *LoadBalancerPolicyList) {
	*out = *l
	out.TypeMeta = l.TypeMeta
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]LoadBalancerPolicy, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy of l.
func (l *LoadBalancerPolicyList) DeepCopy() *LoadBalancerPolicyList {
	if l == nil {
		return nil
	}
	out := new(LoadBalancerPolicyList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of l as a runtime.Object.
func (l *LoadBalancerPolicyList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies s into out.
func (s *LoadBalancerPolicySpec) DeepCopyInto(out *LoadBalancerPolicySpec) {
	*out = *s
	out.TargetRefs = slices.Clone(s.TargetRefs)
	s.TrafficPolicy.DeepCopyInto(&out.TrafficPolicy)
}

// DeepCopy returns a copy of s (the embedded TrafficPolicy's would
// otherwise be promoted).
func (s *LoadBalancerPolicySpec) DeepCopy() *LoadBalancerPolicySpec {
	if s == nil {
		return nil
	}
	out := new(LoadBalancerPolicySpec)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies t into out.
func (t *TrafficPolicy) DeepCopyInto(out *TrafficPolicy) {
	*out = *t
	if t.Persistence != nil {
		out.Persistence = t.Persistence.DeepCopy()
	}
	if t.HealthCheck != nil {
		out.HealthCheck = t.HealthCheck.DeepCopy()
	}
	out.Algorithm = clonePtr(t.Algorithm)
	out.SlowStartSeconds = clonePtr(t.SlowStartSeconds)
	out.DrainSeconds = clonePtr(t.DrainSeconds)
	out.MaxConnectionsPerMember = clonePtr(t.MaxConnectionsPerMember)
}

// DeepCopy returns a copy of t.
func (t *TrafficPolicy) DeepCopy() *TrafficPolicy {
	if t == nil {
		return nil
	}
	out := new(TrafficPolicy)
	t.DeepCopyInto(out)
	return out
}

// DeepCopy returns a copy of p.
func (p *Persistence) DeepCopy() *Persistence {
	if p == nil {
		return nil
	}
	out := *p
	out.TimeoutSeconds = clonePtr(p.TimeoutSeconds)
	out.IdleTimeoutSeconds = clonePtr(p.IdleTimeoutSeconds)
	return &out
}

// DeepCopy returns a copy of h.
func (h *HealthCheck) DeepCopy() *HealthCheck {
	if h == nil {
		return nil
	}
	out := *h
	if h.ExpectedStatuses != nil {
		out.ExpectedStatuses = make([]StatusRange, len(h.ExpectedStatuses))
		for i, r := range h.ExpectedStatuses {
			out.ExpectedStatuses[i] = StatusRange{Min: r.Min, Max: clonePtr(r.Max)}
		}
	}
	out.IntervalSeconds = clonePtr(h.IntervalSeconds)
	out.TimeoutSeconds = clonePtr(h.TimeoutSeconds)
	out.HealthyThreshold = clonePtr(h.HealthyThreshold)
	out.UnhealthyThreshold = clonePtr(h.UnhealthyThreshold)
	return &out
}

// DeepCopyInto copies s into out.
func (s *PolicyStatus) DeepCopyInto(out *PolicyStatus) {
	*out = *s
	if s.Ancestors != nil {
		out.Ancestors = make([]PolicyAncestorStatus, len(s.Ancestors))
		for i := range s.Ancestors {
			s.Ancestors[i].DeepCopyInto(&out.Ancestors[i])
		}
	}
}

// DeepCopyInto copies a into out.
func (a *PolicyAncestorStatus) DeepCopyInto(out *PolicyAncestorStatus) {
	*out = *a
	if a.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(a.Conditions))
		for i := range a.Conditions {
			a.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
