// Package providertest holds what the providers' tests share.
package providertest

import (
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// RuleRefusal returns the first error mc returns for a rule of lb's HTTP
// routes, each alone with the pool it names (lbmodel.RuleModel), as the
// Gateway builder asks; nil when mc serves them all.
func RuleRefusal(mc providers.ModelChecker, lb *lbmodel.LoadBalancer) error {
	if lb.HTTP == nil {
		return nil
	}
	for _, r := range lb.HTTP.Rules {
		var pool *lbmodel.Pool
		if i := slices.IndexFunc(lb.Pools, func(p lbmodel.Pool) bool { return p.Name == r.Pool }); i >= 0 {
			pool = &lb.Pools[i]
		}
		if err := mc.CheckModel(lbmodel.RuleModel(r, pool)); err != nil {
			return err
		}
	}
	return nil
}

// ListenerRefusal returns the first error mc returns for a listener of lb
// alone (lbmodel.ListenerModel), as the Gateway builder asks; nil when
// mc serves them all.
func ListenerRefusal(mc providers.ModelChecker, lb *lbmodel.LoadBalancer) error {
	for _, l := range lb.Listeners {
		if err := mc.CheckModel(lbmodel.ListenerModel(l)); err != nil {
			return err
		}
	}
	return nil
}

// WithPolicy returns a copy of lb whose pools (its HTTP rules' and its TCP
// and UDP listeners') all have the traffic policy pol.
func WithPolicy(lb *lbmodel.LoadBalancer, pol *lbmodel.Policy) *lbmodel.LoadBalancer {
	out := lb.Clone()
	for i := range out.Listeners {
		if out.Listeners[i].Protocol == lbmodel.TCP || out.Listeners[i].Protocol == lbmodel.UDP {
			out.Listeners[i].Pool.Policy = pol
		}
	}
	for i := range out.Pools {
		out.Pools[i].Policy = pol
	}
	return out
}

// AsLegacy returns lb as npl-lbsync 0.x named it, for the tests of the
// upgrade: the load balancer under lbmodel.LegacyName, and its pools (and
// the references to them) under names that join every part with "-".
func AsLegacy(cluster string, lb *lbmodel.LoadBalancer) *lbmodel.LoadBalancer {
	old := lbmodel.LegacyName(cluster, lb)
	rename := func(n string) string {
		if rest, ok := strings.CutPrefix(n, lb.Name); ok && n != "" {
			return old + strings.ReplaceAll(rest, "_", "-")
		}
		return n
	}
	out := lb.Clone()
	out.Name = old
	for i := range out.Listeners {
		l := &out.Listeners[i]
		l.Pool.Name = rename(l.Pool.Name)
		for j := range l.SNI {
			l.SNI[j].Pool = rename(l.SNI[j].Pool)
		}
	}
	for i := range out.Pools {
		out.Pools[i].Name = rename(out.Pools[i].Name)
	}
	if out.HTTP != nil {
		out.HTTP.DefaultPool = rename(out.HTTP.DefaultPool)
		for i := range out.HTTP.Rules {
			out.HTTP.Rules[i].Pool = rename(out.HTTP.Rules[i].Pool)
		}
	}
	return out
}
