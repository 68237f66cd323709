package avi

import "github.com/nodeportlocal/npl/providers"

var _ providers.RuleChecker = (*Provider)(nil)

// CheckRule refuses what gatewaySubset, the check Ensure runs, refuses of a
// Gateway's load balancer that holds only r and its pool.
func (p *Provider) CheckRule(r providers.Rule, pool *providers.Pool) error {
	return gatewaySubset(providers.RuleModel(r, pool))
}
