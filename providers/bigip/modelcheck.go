package bigip

import (
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

var _ providers.ModelChecker = (*provider)(nil)

// CheckModel refuses what served, the check Ensure runs, refuses.
func (p *provider) CheckModel(lb *lbmodel.LoadBalancer) error { return served(lb) }
