package lbpolicy

import (
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// Lookup returns the merged policy of a target (Resolution.Policy), nil
// when no policy targets it.
type Lookup func(Target) *v1alpha1.TrafficPolicy

// Attach sets the policy of every pool of lb from the policies of its
// targets, under the fields the pool's builder set (Overlay):
//
//   - own, when set, is the target whose load balancer lb is (a Service's
//     or a Gateway's): its policy applies to every pool;
//   - backends names, by pool, the backend Services ("namespace/name") of
//     the pools of an Ingress's or a Gateway's rules (builder.Report's
//     PoolBackends): the policy of a pool's only backend Service applies
//     to it, field by field over own's, the more specific target winning.
//
// The parts of a policy that do not apply to a pool's kind (ToModel) are
// left out of it.
func Attach(lb *lbmodel.LoadBalancer, own *Target, backends map[string][]string, lookup Lookup) {
	var ownPolicy *v1alpha1.TrafficPolicy
	if own != nil {
		ownPolicy = lookup(*own)
	}
	set := func(p *lbmodel.Pool, kind PoolKind) {
		tp := ownPolicy
		if svcs := backends[p.Name]; len(svcs) == 1 {
			ns, name, _ := strings.Cut(svcs[0], "/")
			tp = Over(lookup(ServiceTarget(ns, name)), tp)
		}
		if tp == nil {
			return
		}
		m, _ := ToModel(tp, kind)
		p.Policy = Overlay(p.Policy, m)
	}
	for i := range lb.Listeners {
		l := &lb.Listeners[i]
		switch l.Protocol {
		case lbmodel.TCP:
			set(&l.Pool, PoolTCP)
		case lbmodel.UDP:
			set(&l.Pool, PoolUDP)
		}
	}
	for i := range lb.Pools {
		kind := PoolHTTP
		if sniPool(lb, lb.Pools[i].Name) {
			kind = PoolTLS
		}
		set(&lb.Pools[i], kind)
	}
}

// sniPool reports whether a TLS listener's SNI route sends to the pool.
func sniPool(lb *lbmodel.LoadBalancer, pool string) bool {
	return slices.ContainsFunc(lb.Listeners, func(l lbmodel.Listener) bool {
		return slices.ContainsFunc(l.SNI, func(r lbmodel.SNIRoute) bool { return r.Pool == pool })
	})
}
