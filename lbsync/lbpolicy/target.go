// Package lbpolicy applies LoadBalancerPolicies (package v1alpha1) to load
// balancer models: which objects a policy targets, how the policies of one
// target merge (the oldest wins each field, GEP-713), the one conversion of
// a policy into the model's lbmodel.Policy of a pool, how it attaches to
// the pools of a Service's, an Ingress's or a Gateway's load balancer under
// the fields Kubernetes and Gateway API set themselves, and the Accepted
// condition each target gets in the policy's status. It is pure: npl-lbsync
// and nplctl feed it the policies they read.
package lbpolicy

import (
	"cmp"
	"slices"

	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// Target is an object a policy attaches to: a Service or a Gateway.
type Target struct {
	// Kind is v1alpha1.KindService or v1alpha1.KindGateway.
	Kind      string
	Namespace string
	Name      string
}

// ServiceTarget and GatewayTarget name the targets of those kinds.
func ServiceTarget(namespace, name string) Target {
	return Target{Kind: v1alpha1.KindService, Namespace: namespace, Name: name}
}

// GatewayTarget names a Gateway as a target.
func GatewayTarget(namespace, name string) Target {
	return Target{Kind: v1alpha1.KindGateway, Namespace: namespace, Name: name}
}

// String is the target's index key: "Kind/namespace/name".
func (t Target) String() string { return t.Kind + "/" + t.Namespace + "/" + t.Name }

// Ref is the target as a status entry names it.
func (t Target) Ref() v1alpha1.ObjectReference {
	group := v1alpha1.GroupCore
	if t.Kind == v1alpha1.KindGateway {
		group = v1alpha1.GroupGateway
	}
	return v1alpha1.ObjectReference{Group: group, Kind: t.Kind, Namespace: t.Namespace, Name: t.Name}
}

// targetOf returns the target a reference of a policy of namespace names;
// false for a kind a policy cannot target.
func targetOf(namespace string, ref v1alpha1.LocalPolicyTargetReference) (Target, bool) {
	switch {
	case ref.Group == v1alpha1.GroupCore && ref.Kind == v1alpha1.KindService,
		ref.Group == v1alpha1.GroupGateway && ref.Kind == v1alpha1.KindGateway:
		return Target{Kind: ref.Kind, Namespace: namespace, Name: ref.Name}, ref.Name != ""
	}
	return Target{}, false
}

// Targets returns the targets of a policy's spec, sorted, once each; a
// reference to another kind is left out (Check refuses it). A target is
// always in the policy's own namespace: a policy cannot reach another's
// objects.
func Targets(namespace string, spec *v1alpha1.LoadBalancerPolicySpec) []Target {
	var out []Target
	for _, ref := range spec.TargetRefs {
		if t, ok := targetOf(namespace, ref); ok {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return slices.Compact(out)
}
