package lbpolicy

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// Outcome is what a policy is on one of its targets; Condition says it in
// the policy's status entry for the target.
type Outcome struct {
	// NotFound, when set, says why the target gets nothing: it does not
	// exist, or npl-lbsync serves nothing of it.
	NotFound string
	// Invalid is why the policy's spec cannot be applied (Check); KeptLast
	// is set when its last valid spec stays applied instead.
	Invalid  error
	KeptLast bool
	// Won and Overridden are the policy's fields on the target, as
	// Resolve decided.
	Won        []string
	Overridden []Override
	// Unserved says which parts of the fields won do not reach some pool
	// of the target, and why (Serving); Served is set when some part
	// reaches one.
	Unserved []string
	Served   bool
}

// Condition is the Accepted condition of the outcome, for the policy's
// generation: False with TargetNotFound, Invalid (a spec that cannot be
// applied, or one nothing of which is served) or Conflicted (every field
// it sets is an older policy's); otherwise True, its message naming the
// fields overridden and those not served.
func (o Outcome) Condition(generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	switch {
	case o.NotFound != "":
		c.Reason, c.Message = v1alpha1.ReasonTargetNotFound, o.NotFound
	case o.Invalid != nil:
		c.Reason, c.Message = v1alpha1.ReasonInvalid, o.Invalid.Error()
		if o.KeptLast {
			c.Message += "; its last valid spec stays applied"
		}
	case len(o.Won) == 0 && len(o.Overridden) > 0:
		c.Reason, c.Message = v1alpha1.ReasonConflicted, "every field it sets is set by an older policy: "+overrides(o.Overridden)
	case len(o.Won) > 0 && !o.Served:
		c.Reason, c.Message = v1alpha1.ReasonInvalid, "nothing of it is served: "+strings.Join(o.Unserved, "; ")
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAccepted
		c.Message = "applied"
		if len(o.Won) > 0 {
			c.Message += ": " + strings.Join(o.Won, ", ")
		} else {
			c.Message = "sets nothing"
		}
		if len(o.Overridden) > 0 {
			c.Message += "; set by an older policy: " + overrides(o.Overridden)
		}
		if len(o.Unserved) > 0 {
			c.Message += "; not served: " + strings.Join(o.Unserved, "; ")
		}
	}
	return c
}

// OutcomeOf is what policy name, which sets tp, is on a target whose
// policies r merges, whose pools are of kinds, on a provider whose
// capabilities are caps; the caller adds NotFound and Invalid.
func (r Resolution) OutcomeOf(name string, tp *v1alpha1.TrafficPolicy, kinds []PoolKind, caps lbmodel.PolicyCapabilities) Outcome {
	o := Outcome{Won: r.Won[name], Overridden: r.Overridden[name]}
	if len(o.Won) > 0 {
		o.Served, o.Unserved = Serving(only(tp, o.Won), kinds, caps)
	}
	return o
}

func overrides(os []Override) string {
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = o.Field + " (by " + o.By + ")"
	}
	return strings.Join(parts, ", ")
}

// Serving says what of a policy reaches the pools of the kinds given as
// the provider whose capabilities caps are expresses it: whether any part
// does, and each part that does not on some kind of pool, with why (it
// does not apply to the kind, ToModel, or the provider does not express
// it, lbmodel.PolicyCapabilities.StripPolicies, the rule the provider's
// Validated wrapper applies). It asks no provider.
func Serving(tp *v1alpha1.TrafficPolicy, kinds []PoolKind, caps lbmodel.PolicyCapabilities) (served bool, unserved []string) {
	for _, kind := range kinds {
		m, left := ToModel(tp, kind)
		for _, n := range left {
			unserved = append(unserved, fmt.Sprintf("%s on %s pools: %s", n.Field, kind, n.Why))
		}
		if m == nil {
			continue
		}
		kept, gaps := caps.StripPolicies(onePool(m, kind))
		for _, g := range gaps {
			by := "this provider"
			if g.Provider != "" {
				by = "the " + g.Provider + " provider"
			}
			unserved = append(unserved, fmt.Sprintf("%s on %s pools: not supported by %s", g.Field, kind, by))
		}
		if kept.Listeners[0].Pool.Policy != nil || len(kept.Pools) > 0 && kept.Pools[0].Policy != nil {
			served = true
		}
	}
	return served, slices.Compact(unserved)
}

// onePool is a load balancer of one pool of kind with policy p, for
// StripPolicies.
func onePool(p *lbmodel.Policy, kind PoolKind) *lbmodel.LoadBalancer {
	pool := lbmodel.Pool{Name: "policy", Policy: p}
	switch kind {
	case PoolTCP:
		return &lbmodel.LoadBalancer{Listeners: []lbmodel.Listener{{Protocol: lbmodel.TCP, Pool: pool}}}
	case PoolUDP:
		return &lbmodel.LoadBalancer{Listeners: []lbmodel.Listener{{Protocol: lbmodel.UDP, Pool: pool}}}
	}
	return &lbmodel.LoadBalancer{Kind: lbmodel.L7, Listeners: []lbmodel.Listener{{Protocol: lbmodel.HTTP}}, Pools: []lbmodel.Pool{pool}}
}

// SpeaksFor reports whether the installation of clusterName writes an
// entry in a policy's status for a target: for every target but a Service
// another installation claims and a Gateway of a GatewayClass another
// installation serves, which that installation's npl-lbsync reports on
// (an entry of ours would only say TargetNotFound beside it). service is
// the target's Service, nil when there is none (or the target is a
// Gateway); gatewayOfAnother is true for a Gateway that exists with a
// GatewayClass the installation does not serve.
func SpeaksFor(t Target, service *corev1.Service, gatewayOfAnother bool, clusterName string) bool {
	switch t.Kind {
	case v1alpha1.KindService:
		return service == nil || !claim.ClaimedByOther(service, clusterName)
	case v1alpha1.KindGateway:
		return !gatewayOfAnother
	}
	return true
}

// TargetOf is the target a status entry names.
func TargetOf(ref v1alpha1.ObjectReference) Target {
	return Target{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
}

// MaxAncestors is how many entries status.ancestors holds (the CRD's
// maxItems, as Gateway API's PolicyStatus).
const MaxAncestors = 16

// Ancestors returns a policy's status entries from the current ones for
// the installation whose entries are controllerName's
// (v1alpha1.ControllerNameOf): those of other controllers and
// installations stay as they are; ours for the targets of desired get
// their condition (its lastTransitionTime kept when its status does not
// change); ours for any other target go. Ours are sorted by target, after
// the others, and those past MaxAncestors are left out.
func Ancestors(current []v1alpha1.PolicyAncestorStatus, controllerName string, desired map[Target]metav1.Condition, now metav1.Time) []v1alpha1.PolicyAncestorStatus {
	var out []v1alpha1.PolicyAncestorStatus
	have := map[v1alpha1.ObjectReference][]metav1.Condition{}
	for _, a := range current {
		if a.ControllerName == controllerName {
			have[a.AncestorRef] = a.Conditions
			continue
		}
		out = append(out, a)
	}
	targets := make([]Target, 0, len(desired))
	for t := range desired {
		targets = append(targets, t)
	}
	slices.SortFunc(targets, func(a, b Target) int { return strings.Compare(a.String(), b.String()) })
	for _, t := range targets {
		ref := t.Ref()
		conds := slices.Clone(have[ref])
		c := desired[t]
		c.LastTransitionTime = now
		meta.SetStatusCondition(&conds, c)
		if len(out) >= MaxAncestors {
			break
		}
		out = append(out, v1alpha1.PolicyAncestorStatus{AncestorRef: ref, ControllerName: controllerName, Conditions: conds})
	}
	return out
}
