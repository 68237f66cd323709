package bigip

import "github.com/nodeportlocal/npl/providers"

var _ providers.RuleChecker = (*provider)(nil)

// CheckRule refuses what served, the check Ensure runs, refuses of a
// Gateway's load balancer that holds only r and its pool.
func (p *provider) CheckRule(r providers.Rule, pool *providers.Pool) error {
	return served(providers.RuleModel(r, pool))
}
