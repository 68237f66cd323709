package lbpolicy

import (
	"cmp"
	"slices"
	"time"

	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// A field is one setting of a TrafficPolicy, the unit of a merge: two
// policies that set the same field conflict, whatever their values; a
// health check or an algorithm merges whole.
type field struct {
	name string
	set  func(*v1alpha1.TrafficPolicy) bool
	// take copies the field of src into dst.
	take func(dst, src *v1alpha1.TrafficPolicy)
}

// fields are every field of TrafficPolicy, in the order of the spec.
var fields = []field{
	{"persistence", func(t *v1alpha1.TrafficPolicy) bool { return t.Persistence != nil },
		func(d, s *v1alpha1.TrafficPolicy) { d.Persistence = s.Persistence }},
	{"healthCheck", func(t *v1alpha1.TrafficPolicy) bool { return t.HealthCheck != nil },
		func(d, s *v1alpha1.TrafficPolicy) { d.HealthCheck = s.HealthCheck }},
	{"algorithm", func(t *v1alpha1.TrafficPolicy) bool { return t.Algorithm != nil },
		func(d, s *v1alpha1.TrafficPolicy) { d.Algorithm = s.Algorithm }},
	{"slowStartSeconds", func(t *v1alpha1.TrafficPolicy) bool { return t.SlowStartSeconds != nil },
		func(d, s *v1alpha1.TrafficPolicy) { d.SlowStartSeconds = s.SlowStartSeconds }},
	{"drainSeconds", func(t *v1alpha1.TrafficPolicy) bool { return t.DrainSeconds != nil },
		func(d, s *v1alpha1.TrafficPolicy) { d.DrainSeconds = s.DrainSeconds }},
	{"maxConnectionsPerMember", func(t *v1alpha1.TrafficPolicy) bool { return t.MaxConnectionsPerMember != nil },
		func(d, s *v1alpha1.TrafficPolicy) { d.MaxConnectionsPerMember = s.MaxConnectionsPerMember }},
}

// only returns the fields of p that names lists.
func only(p *v1alpha1.TrafficPolicy, names []string) *v1alpha1.TrafficPolicy {
	out := &v1alpha1.TrafficPolicy{}
	for _, f := range fields {
		if slices.Contains(names, f.name) && f.set(p) {
			f.take(out, p)
		}
	}
	return out
}

// Candidate is one policy of a target as a merge sees it.
type Candidate struct {
	Name    string
	Created time.Time
	// Policy is what it sets: its spec, or the last valid one of a policy
	// now invalid; nil contributes nothing.
	Policy *v1alpha1.TrafficPolicy
}

// Override is a field of a policy that an older policy sets on the same
// target.
type Override struct {
	Field string
	// By is the older policy, whose value applies.
	By string
}

// Resolution is the merge of the policies of one target.
type Resolution struct {
	// Policy is the merged policy: each field from the oldest policy that
	// sets it.
	Policy v1alpha1.TrafficPolicy
	// Won holds, per policy, the fields whose value it gives; Overridden
	// the fields it sets that an older policy gives.
	Won        map[string][]string
	Overridden map[string][]Override
}

// Resolve merges the policies of one target as Gateway API's policy
// attachment does, field by field: the oldest policy (creation time, then
// name) that sets a field gives its value.
func Resolve(cands []Candidate) Resolution {
	cands = slices.Clone(cands)
	slices.SortFunc(cands, func(a, b Candidate) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name))
	})
	r := Resolution{Won: map[string][]string{}, Overridden: map[string][]Override{}}
	by := map[string]string{}
	for _, c := range cands {
		if c.Policy == nil {
			continue
		}
		for _, f := range fields {
			if !f.set(c.Policy) {
				continue
			}
			if winner, taken := by[f.name]; taken {
				r.Overridden[c.Name] = append(r.Overridden[c.Name], Override{Field: f.name, By: winner})
				continue
			}
			by[f.name] = c.Name
			f.take(&r.Policy, c.Policy)
			r.Won[c.Name] = append(r.Won[c.Name], f.name)
		}
	}
	return r
}

// Over returns, field by field, the fields specific sets and the others of
// general: a Service's policy over its Gateway's on a rule pool whose only
// backend is the Service. Either may be nil.
func Over(specific, general *v1alpha1.TrafficPolicy) *v1alpha1.TrafficPolicy {
	if specific == nil {
		return general
	}
	if general == nil {
		return specific
	}
	out := *general
	for _, f := range fields {
		if f.set(specific) {
			f.take(&out, specific)
		}
	}
	return &out
}

// Index returns the Lookup of a set of policies read at once (nplctl's):
// each target's valid policies merged. An invalid policy counts for
// nothing: unlike npl-lbsync, a reader of one moment does not know its
// last valid spec.
func Index(policies []*v1alpha1.LoadBalancerPolicy) Lookup {
	byTarget := map[Target][]Candidate{}
	for _, p := range policies {
		if Check(&p.Spec) != nil {
			continue
		}
		for _, t := range Targets(p.Namespace, &p.Spec) {
			byTarget[t] = append(byTarget[t], Candidate{Name: p.Name, Created: p.CreationTimestamp.Time, Policy: &p.Spec.TrafficPolicy})
		}
	}
	merged := map[Target]*v1alpha1.TrafficPolicy{}
	for t, cands := range byTarget {
		if r := Resolve(cands); len(r.Won) > 0 {
			merged[t] = &r.Policy
		}
	}
	return func(t Target) *v1alpha1.TrafficPolicy { return merged[t] }
}
