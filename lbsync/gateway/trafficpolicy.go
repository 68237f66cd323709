package gateway

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// XBackendTrafficPolicy (gateway.networking.x-k8s.io/v1alpha1, Gateway
// API's experimental channel): the session persistence of a Service's
// backends. A policy targets Services of its own namespace; the policy of
// a Service is the oldest that targets it (GEP-713: creation time, then
// namespace/name), the others that target it are Conflicted. Its
// sessionPersistence, converted as a rule's own (persistence), is the
// persistence of the pools of the HTTPRoute and GRPCRoute rules that send
// to the Service, unless the rule sets sessionPersistence itself: the
// rule's wins. The valid backends of a rule without its own must agree
// (checkTrafficPolicy: else the route is not accepted, as for
// BackendTLSPolicy). A policy whose sessionPersistence is invalid is not
// accepted and its Services are served without it. retryConstraint has no
// counterpart in the model, and a field of the persistence the provider
// cannot express is stripped from the pool (providers.Validated): both
// are named in the policy's Accepted message and in a warning.

// KindXBackendTrafficPolicy is the kind of the policy.
const KindXBackendTrafficPolicy = "XBackendTrafficPolicy"

// trafficPolicy is one XBackendTrafficPolicy resolved.
type trafficPolicy struct {
	p *gatewayxv1a1.XBackendTrafficPolicy
	// persistence is nil when the policy asks for none or is not
	// accepted.
	persistence *lbmodel.Persistence
	// invalid says why the policy is not accepted ("": it is).
	invalid string
	// notServed names the fields that are not served, with why.
	notServed []string
}

// id is "XBackendTrafficPolicy namespace/name".
func (tp *trafficPolicy) id() string {
	return KindXBackendTrafficPolicy + " " + tp.p.Namespace + "/" + tp.p.Name
}

// TrafficPolicyTargets returns the Services an XBackendTrafficPolicy
// targets, without duplicates, sorted.
func TrafficPolicyTargets(p *gatewayxv1a1.XBackendTrafficPolicy) []ServiceRef {
	var out []ServiceRef
	for _, t := range p.Spec.TargetRefs {
		if isService(t, string(t.Name)) {
			out = append(out, ServiceRef{Namespace: p.Namespace, Name: string(t.Name)})
		}
	}
	slices.SortFunc(out, compareRefs)
	return slices.Compact(out)
}

// indexTrafficPolicies sorts the policies by precedence.
func (b *build) indexTrafficPolicies() {
	b.trafficPolicies = byPrecedence(b.in.TrafficPolicies)
	b.trafficResolved = map[*gatewayxv1a1.XBackendTrafficPolicy]*trafficPolicy{}
}

// trafficPolicyOf returns the policy of a backend Service, nil when none
// targets it.
func (b *build) trafficPolicyOf(svc *corev1.Service) *trafficPolicy {
	for _, p := range b.trafficPolicies {
		if p.Namespace == svc.Namespace && slices.Contains(TrafficPolicyTargets(p), ServiceRef{Namespace: svc.Namespace, Name: svc.Name}) {
			return b.resolveTraffic(p)
		}
	}
	return nil
}

// resolveTraffic resolves a policy once per build: its persistence, and
// what of it is not served (Input.PolicyCapabilities).
func (b *build) resolveTraffic(p *gatewayxv1a1.XBackendTrafficPolicy) *trafficPolicy {
	if tp := b.trafficResolved[p]; tp != nil {
		return tp
	}
	tp := &trafficPolicy{p: p}
	b.trafficResolved[p] = tp
	if p.Spec.RetryConstraint != nil {
		tp.notServed = append(tp.notServed, "retryConstraint (npl-lbsync has no retry budget)")
	}
	if sp := p.Spec.SessionPersistence; sp != nil {
		s, err := persistence(sp)
		if err != nil {
			tp.invalid = fmt.Sprintf("sessionPersistence: %v", err)
			return tp
		}
		tp.persistence = s
		if c := b.in.PolicyCapabilities; c != nil {
			lb := &lbmodel.LoadBalancer{Pools: []lbmodel.Pool{{Policy: &lbmodel.Policy{Persistence: s}}}}
			if _, gaps := c.StripPolicies(lb); len(gaps) > 0 {
				for _, g := range gaps {
					tp.notServed = append(tp.notServed, fmt.Sprintf("%s (the %s provider does not support it)", g.Field, c.Provider))
				}
			}
		}
	}
	return tp
}

// backendPersistence returns the persistence the policies of the valid
// backends of rule i of a route ask for (nil: none), or why they cannot
// be served: they differ (one pool keeps its clients one way).
func (b *build) backendPersistence(rt *routeView, i int) (*lbmodel.Persistence, error) {
	var first *lbmodel.Persistence
	firstID := ""
	for _, be := range b.servedBackends(rt, i) {
		var s *lbmodel.Persistence
		if tp := b.trafficPolicyOf(be.svc); tp != nil {
			s = tp.persistence
		}
		if firstID == "" {
			first, firstID = s, be.String()
			continue
		}
		if !reflect.DeepEqual(first, s) {
			return nil, fmt.Errorf("backends %s and %s differ in session persistence (XBackendTrafficPolicy): the backends of a rule without its own sessionPersistence must agree", firstID, be.String())
		}
	}
	return first, nil
}

// checkTrafficPolicy says why rule i of an HTTPRoute or GRPCRoute, of
// policy (rulePolicy), cannot be served: its backends' policies differ
// and the rule has no sessionPersistence of its own.
func (b *build) checkTrafficPolicy(rt *routeView, i int, policy *lbmodel.Policy) error {
	_, err := b.withTrafficPolicy(rt, i, policy)
	return err
}

// withTrafficPolicy returns policy, the rule's own, with the persistence
// of its backends' XBackendTrafficPolicy when the rule sets none.
func (b *build) withTrafficPolicy(rt *routeView, i int, policy *lbmodel.Policy) (*lbmodel.Policy, error) {
	if (rt.kind != KindHTTPRoute && rt.kind != KindGRPCRoute) || (policy != nil && policy.Persistence != nil) {
		return policy, nil
	}
	s, err := b.backendPersistence(rt, i)
	if err != nil || s == nil {
		return policy, err
	}
	if policy == nil {
		policy = &lbmodel.Policy{}
	}
	policy.Persistence = s
	return policy, nil
}

// trafficPolicyResults returns the status of each policy that targets a
// Service among backends: Accepted True when it is the policy of a Service
// it targets and is valid (its message names what is not served), False
// Invalid when it is not valid, Conflicted when an older policy targets
// each one.
func (b *build) trafficPolicyResults(backends []ServiceRef) []PolicyResult {
	var out []PolicyResult
	for i, p := range b.trafficPolicies {
		var won, conflicted []string
		for _, ref := range TrafficPolicyTargets(p) {
			if !slices.Contains(backends, ref) {
				continue
			}
			if slices.ContainsFunc(b.trafficPolicies[:i], func(o *gatewayxv1a1.XBackendTrafficPolicy) bool {
				return o.Namespace == ref.Namespace && slices.Contains(TrafficPolicyTargets(o), ref)
			}) {
				conflicted = append(conflicted, "Service "+ref.String())
			} else {
				won = append(won, "Service "+ref.String())
			}
		}
		if len(won)+len(conflicted) == 0 {
			continue
		}
		tp := b.resolveTraffic(p)
		typ, gen := string(gatewayv1.PolicyConditionAccepted), p.Generation
		var accepted metav1.Condition
		switch {
		case len(won) > 0 && tp.invalid != "":
			accepted = b.cond(typ, false, string(gatewayv1.PolicyReasonInvalid), tp.invalid, gen)
		case len(won) > 0:
			msg := "Accepted for " + strings.Join(won, ", ")
			if len(tp.notServed) > 0 {
				msg += "; not served: " + strings.Join(tp.notServed, ", ")
				b.warnf("%s: not served: %s", tp.id(), strings.Join(tp.notServed, ", "))
			}
			accepted = b.cond(typ, true, string(gatewayv1.PolicyReasonAccepted), msg, gen)
		default:
			accepted = b.cond(typ, false, string(gatewayv1.PolicyReasonConflicted),
				"an older XBackendTrafficPolicy targets "+strings.Join(conflicted, ", "), gen)
		}
		out = append(out, PolicyResult{Namespace: p.Namespace, Name: p.Name, Conditions: []metav1.Condition{accepted}})
	}
	slices.SortFunc(out, comparePolicyResults)
	return out
}
