package lbpolicy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// Check returns why a policy's spec cannot be applied: what its CRD's
// schema and rules refuse at admission, checked again here because a
// policy may have been stored before them (an older CRD), and every value
// the model refuses (lbmodel.Normalize, the one owner of the model's
// rules, applied to a pool of HTTP rules, which may have every field).
func Check(spec *v1alpha1.LoadBalancerPolicySpec) error {
	if len(spec.TargetRefs) == 0 {
		return errors.New("targetRefs: no target")
	}
	seen := map[v1alpha1.LocalPolicyTargetReference]bool{}
	for _, ref := range spec.TargetRefs {
		if _, ok := targetOf("", ref); !ok {
			return fmt.Errorf("targetRefs: %s %q (group %q) is not a Service nor a Gateway", ref.Kind, ref.Name, ref.Group)
		}
		if seen[ref] {
			return fmt.Errorf("targetRefs: %s %s named twice", ref.Kind, ref.Name)
		}
		seen[ref] = true
	}
	tp := &spec.TrafficPolicy
	if c := tp.HealthCheck; c != nil {
		for _, v := range []struct {
			name string
			p    *int32
		}{{"intervalSeconds", c.IntervalSeconds}, {"timeoutSeconds", c.TimeoutSeconds},
			{"healthyThreshold", c.HealthyThreshold}, {"unhealthyThreshold", c.UnhealthyThreshold}} {
			if v.p != nil && *v.p < 1 {
				return fmt.Errorf("healthCheck.%s: %d is not positive", v.name, *v.p)
			}
		}
	}
	if s := tp.Persistence; s != nil && s.Type != v1alpha1.PersistenceSourceIP && s.Name == "" {
		return fmt.Errorf("persistence: %s persistence needs a name", s.Type)
	}
	if a := tp.Algorithm; a != nil && a.Type == v1alpha1.AlgorithmConsistentHash && a.HashOn == "" {
		return errors.New("algorithm: a consistent hash needs hashOn")
	}
	p, _ := ToModel(tp, PoolHTTP)
	const pool = "policy"
	lb := &lbmodel.LoadBalancer{Name: pool, Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools:     []lbmodel.Pool{{Name: pool, Policy: p}},
		HTTP:      &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{{Path: "/", PathType: lbmodel.PathPrefix, Pool: pool}}},
	}
	if _, err := lbmodel.Normalize(lb); err != nil {
		var invalid *lbmodel.InvalidModelError
		if errors.As(err, &invalid) && invalid.Err != nil {
			err = invalid.Err
		}
		msg, _ := strings.CutPrefix(err.Error(), "pool "+pool+": policy: ")
		return errors.New(msg)
	}
	return nil
}
