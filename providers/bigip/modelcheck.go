package bigip

import "github.com/nodeportlocal/npl/providers"

var _ providers.ModelChecker = (*provider)(nil)

// CheckModel refuses what served, the check Ensure runs, refuses.
func (p *provider) CheckModel(lb *providers.LoadBalancer) error { return served(lb) }
