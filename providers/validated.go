package providers

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodeportlocal/npl/lbmodel"
)

// ModelChecker is implemented by a provider that cannot serve every model
// of a Gateway's load balancer that lbmodel.Normalize accepts. npl-lbsync's Gateway
// builder asks it about one listener (ListenerModel) and one rule of a
// route (RuleModel) at a time and leaves out the listeners and routes it
// refuses (their statuses say why), so that one part the provider cannot
// express does not keep the rest of the Gateway from being served. Ensure
// still refuses a whole model holding such a part, with the same check.
type ModelChecker interface {
	// CheckModel returns the error Ensure would refuse the Gateway's load
	// balancer lb with: one wrapping ErrUnsupported that names the part
	// (an UnsupportedRule error for a rule). It returns nil when the
	// provider serves all of lb.
	CheckModel(lb *lbmodel.LoadBalancer) error
}

// ModelCheckerOf returns the ModelChecker of p, behind Validated when it
// is; nil when p serves every model lbmodel.Normalize accepts.
func ModelCheckerOf(p Provider) ModelChecker {
	if v, ok := p.(*validated); ok {
		p = v.next
	}
	mc, _ := p.(ModelChecker)
	return mc
}

// PolicyCapable is implemented by a provider that expresses some of a
// pool's traffic policy. A provider that does not implement it expresses
// none: every policy field is reported, the members are served.
type PolicyCapable interface {
	PolicyCapabilities() lbmodel.PolicyCapabilities
}

// PolicyCapabilitiesOf returns what p expresses of pools' policies, behind
// Validated when it is.
func PolicyCapabilitiesOf(p Provider) lbmodel.PolicyCapabilities {
	if v, ok := p.(*validated); ok {
		p = v.next
	}
	if pc, ok := p.(PolicyCapable); ok {
		return pc.PolicyCapabilities()
	}
	return lbmodel.PolicyCapabilities{}
}

// Validated returns p behind the one check of the model: its Ensure runs
// lbmodel.Normalize and hands p the canonical copy, or returns the
// *lbmodel.InvalidModelError without calling p, so a model that breaks a rule (one
// with nothing to serve, say) never changes a load balancer. The policy
// fields p cannot express (PolicyCapable) are left out of what it gets and
// named in the Status's warnings, so that none disappears silently and the
// rest is applied. The registry applies it to every provider it opens;
// applying it again returns p as is.
func Validated(p Provider) Provider {
	if _, done := p.(*validated); done {
		return p
	}
	return &validated{next: p}
}

type validated struct{ next Provider }

func (v *validated) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (Status, error) {
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		return Status{}, err
	}
	n, gaps := PolicyCapabilitiesOf(v.next).StripPolicies(n)
	st, err := v.next.Ensure(ctx, n)
	if err != nil {
		return st, err
	}
	for _, g := range gaps {
		st.Warnings = append(st.Warnings, g.String())
	}
	return st, nil
}

// Delete checks the name and kind, and hands p the kind in canonical form
// (empty for L4).
func (v *validated) Delete(ctx context.Context, name string, kind lbmodel.Kind) error {
	switch {
	case name == "":
		return &lbmodel.InvalidModelError{Err: errors.New("delete: no name")}
	case kind == lbmodel.L4:
		kind = ""
	case kind != "" && kind != lbmodel.L7:
		return &lbmodel.InvalidModelError{LoadBalancer: name, Err: fmt.Errorf("delete: kind %q is not L4 or L7", kind)}
	}
	return v.next.Delete(ctx, name, kind)
}

func (v *validated) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) {
	return v.next.List(ctx)
}

// Unwrap returns the provider behind the check.
func (v *validated) Unwrap() Provider { return v.next }

// Unwrap returns the provider behind the decorators that wrap p (those with
// an Unwrap() Provider method, such as Validated's), for the extras a
// provider offers beyond the interface, such as the mock's HTTP handler.
func Unwrap(p Provider) Provider {
	for {
		u, ok := p.(interface{ Unwrap() Provider })
		if !ok {
			return p
		}
		p = u.Unwrap()
	}
}
