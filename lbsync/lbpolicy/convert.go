package lbpolicy

import (
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// PoolKind is what a pool serves, which decides the parts of a policy that
// apply to it.
type PoolKind string

const (
	// PoolTCP and PoolUDP are the pools of TCP and UDP listeners.
	PoolTCP PoolKind = "TCP"
	PoolUDP PoolKind = "UDP"
	// PoolHTTP is a pool of HTTP rules (Ingress, HTTPRoute, GRPCRoute).
	PoolHTTP PoolKind = "HTTP"
	// PoolTLS is a pool of a TLS listener's SNI routes: TLS connections,
	// not HTTP requests.
	PoolTLS PoolKind = "TLS"
)

// NotApplied is a field of a policy that does not apply to a kind of pool.
type NotApplied struct {
	Field string
	Why   string
}

// ToModel is the one conversion of a policy into the model: the policy of
// a pool of kind, and the fields left out because they do not apply to it
// (a cookie or header on a pool that does not serve HTTP requests, a
// health check of a UDP pool, which neither a TCP connect nor an HTTP
// request can test). nil when it sets nothing.
func ToModel(tp *v1alpha1.TrafficPolicy, kind PoolKind) (*lbmodel.Policy, []NotApplied) {
	if tp == nil {
		return nil, nil
	}
	http := kind == PoolHTTP
	var out lbmodel.Policy
	var left []NotApplied
	if s := tp.Persistence; s != nil {
		if s.Type == v1alpha1.PersistenceSourceIP || http {
			out.Persistence = &lbmodel.Persistence{Type: lbmodel.PersistenceType(s.Type), Name: s.Name,
				TimeoutSeconds: deref(s.TimeoutSeconds), IdleTimeoutSeconds: deref(s.IdleTimeoutSeconds)}
		} else {
			left = append(left, NotApplied{"persistence.type=" + s.Type, "only the pools of HTTP rules have it"})
		}
	}
	if c := tp.HealthCheck; c != nil {
		if kind != PoolUDP {
			hc := &lbmodel.HealthCheck{Type: lbmodel.HealthCheckType(c.Type), Path: c.Path, Host: c.Host,
				IntervalSeconds: deref(c.IntervalSeconds), TimeoutSeconds: deref(c.TimeoutSeconds),
				Rise: deref(c.HealthyThreshold), Fall: deref(c.UnhealthyThreshold)}
			for _, r := range c.ExpectedStatuses {
				hi := r.Min
				if r.Max != nil {
					hi = *r.Max
				}
				hc.ExpectedStatuses = append(hc.ExpectedStatuses, lbmodel.StatusRange{Min: r.Min, Max: hi})
			}
			out.HealthCheck = hc
		} else {
			left = append(left, NotApplied{"healthCheck", "a UDP pool has no health check"})
		}
	}
	if a := tp.Algorithm; a != nil {
		if a.HashOn == "" || a.HashOn == v1alpha1.HashOnSourceIP || http {
			out.Algorithm = &lbmodel.Algorithm{Type: lbmodel.AlgorithmType(a.Type), HashOn: lbmodel.HashKey(a.HashOn), HashName: a.HashName}
		} else {
			left = append(left, NotApplied{"algorithm.hashOn=" + a.HashOn, "only the pools of HTTP rules have it"})
		}
	}
	out.SlowStartSeconds = deref(tp.SlowStartSeconds)
	if tp.DrainSeconds != nil {
		d := *tp.DrainSeconds
		out.DrainSeconds = &d
	}
	out.MaxConnectionsPerMember = deref(tp.MaxConnectionsPerMember)
	if out == (lbmodel.Policy{}) {
		return nil, left
	}
	return &out, left
}

// Overlay returns the policy of a pool whose builder set native (from a
// Service's sessionAffinity, a route's sessionPersistence, timeouts and
// retry, a BackendTLSPolicy) with the fields of policy that native leaves
// unset: what Kubernetes and Gateway API express themselves wins over a
// LoadBalancerPolicy. Neither is modified.
func Overlay(native, policy *lbmodel.Policy) *lbmodel.Policy {
	if policy == nil {
		return native
	}
	if native == nil {
		return policy
	}
	out := *native
	if out.Persistence == nil {
		out.Persistence = policy.Persistence
	}
	if out.HealthCheck == nil {
		out.HealthCheck = policy.HealthCheck
	}
	if out.Algorithm == nil {
		out.Algorithm = policy.Algorithm
	}
	if out.SlowStartSeconds == 0 {
		out.SlowStartSeconds = policy.SlowStartSeconds
	}
	if out.DrainSeconds == nil {
		out.DrainSeconds = policy.DrainSeconds
	}
	if out.MaxConnectionsPerMember == 0 {
		out.MaxConnectionsPerMember = policy.MaxConnectionsPerMember
	}
	return &out
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
